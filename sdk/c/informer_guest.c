// The C guest SDK: the component exports (over the bindings that
// `c-plugin-build bindings wit batched-handler` generates as
// batched_handler.h/.c), the batch path, the per-call arena, logging and
// object accessors; the JSON parser is informer_guest_json.c. See
// informer_guest.h.
#include "informer_guest.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batched_handler.h"

typedef informer_host_plugin_types_borrow_object_t borrow_t;
typedef informer_host_plugin_types_own_object_t own_t;

// ---- the batch in flight --------------------------------------------------
//
// `on-batch` passes many notifications per call. An object of the batch is
// an `ig_object` whose handle is -1 - slot: its metadata is read from the
// batch's one buffer (`delivery.metadata`), and the host's handle is taken
// (`delivery.lend`) only when something else is read, then dropped when the
// item returns. Before an item's first visible effect (a log line, a trap
// message) the host is told `delivery.begin`, and after such an item or one
// that returned an error `delivery.done`, so a trap skips exactly that item.

static struct {
  bool active;
  uint32_t index;
  bool begun;
  int32_t *lent; // per slot: the lent handle, 0 if none
  size_t slots, lent_cap;
  bool fetched; // `meta` holds the batch's metadata
  batched_handler_list_u8_t meta;
  size_t *records; // per decoded slot: its record's offset in `meta`
  size_t decoded, records_cap, next_record;
} batch;

static void before_visible_effect(void) {
  if (batch.active && !batch.begun) {
    batch.begun = true;
    informer_host_plugin_delivery_begin(batch.index);
  }
}

static bool is_lendable(ig_object obj) { return obj.handle < 0; }
static uint32_t slot_of(ig_object obj) { return (uint32_t)(-1 - obj.handle); }

static int32_t lent_handle(uint32_t slot) {
  if (!batch.active || slot >= batch.slots) ig_trap("an object of a batch was used after its notification returned");
  if (!batch.lent[slot]) batch.lent[slot] = informer_host_plugin_delivery_lend(slot).__handle;
  return batch.lent[slot];
}

// Bytes of a record's header in `delivery.metadata`: the record's size; the
// offset (from the record's start) and length of each of its seven fields;
// its label count. The label table of 2n + 1 offsets follows it.
#define RECORD_HEADER 64

static uint32_t u32_at(size_t at) {
  if (at + 4 > batch.meta.len) ig_trap("the host's metadata buffer is truncated");
  uint32_t v;
  memcpy(&v, batch.meta.ptr + at, 4);
  return v;
}

// The offset of `slot`'s record in the batch's metadata buffer.
static size_t record_of(uint32_t slot) {
  if (!batch.fetched) {
    informer_host_plugin_delivery_metadata(&batch.meta);
    batch.fetched = true;
  }
  while (batch.decoded <= slot) {
    if (batch.decoded == batch.records_cap) {
      batch.records_cap = batch.records_cap ? 2 * batch.records_cap : 64;
      batch.records = realloc(batch.records, batch.records_cap * sizeof *batch.records);
      if (!batch.records) abort();
    }
    size_t at = batch.next_record;
    batch.records[batch.decoded++] = at;
    // A record starts with its size; a size below the header's is never
    // sent and would not advance.
    uint32_t size = u32_at(at);
    if (size < RECORD_HEADER) ig_trap("the host's metadata buffer has a malformed record");
    batch.next_record = at + size;
  }
  return batch.records[slot];
}

// The buffer's bytes `start..end` as a NUL-terminated copy in the arena.
static const char *text_at(size_t start, size_t end) {
  if (start > end || end > batch.meta.len) ig_trap("the host's metadata buffer has a malformed record");
  char *s = ig_alloc(end - start + 1);
  memcpy(s, batch.meta.ptr + start, end - start);
  s[end - start] = '\0';
  return s;
}

static size_t record_checked(ig_object obj) {
  if (!batch.active) ig_trap("an object of a batch was used after its notification returned");
  return record_of(slot_of(obj));
}

// Field `field` of an object's metadata: 0 key, 1 namespace, 2 name, 3 uid,
// 4 resource version, 5 api version, 6 kind. NULL for none.
static const char *meta_field(ig_object obj, int field) {
  size_t record = record_checked(obj);
  size_t start = record + u32_at(record + 4 + 8 * (size_t)field);
  uint32_t n = u32_at(record + 8 + 8 * (size_t)field);
  return n == UINT32_MAX ? NULL : text_at(start, start + n);
}

// An object's labels: where its record starts and how many there are.
// Label i's key and value lie between bounds 2i, 2i + 1 and 2i + 2.
static uint32_t labels_of(ig_object obj, size_t *record) {
  *record = record_checked(obj);
  return u32_at(*record + 4 * 15);
}

static size_t label_bound(size_t record, size_t j) {
  return record + u32_at(record + RECORD_HEADER + 4 * j);
}

// ---- the per-call arena ---------------------------------------------------

static void **arena;
static size_t arena_len, arena_cap;

static void *track(void *p) {
  if (!p) abort();
  if (arena_len == arena_cap) {
    arena_cap = arena_cap ? 2 * arena_cap : 64;
    arena = realloc(arena, arena_cap * sizeof *arena);
    if (!arena) abort();
  }
  arena[arena_len++] = p;
  return p;
}

static void arena_reset(void) {
  for (size_t i = 0; i < arena_len; i++) free(arena[i]);
  arena_len = 0;
}

void *ig_alloc(size_t size) { return track(malloc(size ? size : 1)); }

char *ig_keep(const char *s) {
  if (!s) return NULL;
  char *copy = strdup(s);
  if (!copy) abort();
  return copy;
}

static const char *vformat(const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  if (n < 0) abort();
  char *buf = ig_alloc((size_t)n + 1);
  vsnprintf(buf, (size_t)n + 1, fmt, again);
  va_end(again);
  return buf;
}

const char *ig_format(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

// A string the host allocated (with cabi_realloc), NUL-terminated and owned
// by the arena.
static const char *take(batched_handler_string_t s) {
  if (s.len == 0) return ""; // the canonical ABI's pointer is then no allocation
  char *p = realloc(s.ptr, s.len + 1);
  if (!p) abort();
  p[s.len] = '\0';
  return track(p);
}

// ---- results and traps ----------------------------------------------------

ig_result ig_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const char *s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

_Noreturn void ig_trap(const char *fmt, ...) {
  // The message is a visible effect: the trap must skip this item only.
  before_visible_effect();
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  abort();
}

// ---- logging --------------------------------------------------------------

void ig_log_str(ig_level level, const char *message) {
  before_visible_effect();
  batched_handler_string_t s;
  batched_handler_string_set(&s, message);
  informer_host_plugin_log_log((informer_host_plugin_log_level_t)level, &s);
}

void ig_log(ig_level level, const char *fmt, ...) {
  char small[256];
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int n = vsnprintf(small, sizeof small, fmt, ap);
  va_end(ap);
  if (n < 0) abort();
  if ((size_t)n < sizeof small) {
    ig_log_str(level, small);
  } else {
    char *big = malloc((size_t)n + 1);
    if (!big) abort();
    vsnprintf(big, (size_t)n + 1, fmt, again);
    ig_log_str(level, big);
    free(big);
  }
  va_end(again);
}

// ---- objects --------------------------------------------------------------

static borrow_t borrow(ig_object obj) {
  return (borrow_t){is_lendable(obj) ? lent_handle(slot_of(obj)) : obj.handle};
}

// `field`: where a batch object's metadata holds it (see `meta_field`), or
// -1 for what only the host has.
#define STRING_ACCESSOR(name, method, field)                                   \
  const char *name(ig_object obj) {                                            \
    if ((field) >= 0 && is_lendable(obj)) return meta_field(obj, (field));     \
    batched_handler_string_t s;                                                \
    informer_host_plugin_types_method_object_##method(borrow(obj), &s);        \
    return take(s);                                                            \
  }
#define OPTION_ACCESSOR(name, method, field)                                   \
  const char *name(ig_object obj) {                                            \
    if (is_lendable(obj)) return meta_field(obj, (field));                     \
    batched_handler_string_t s;                                                \
    if (!informer_host_plugin_types_method_object_##method(borrow(obj), &s))   \
      return NULL;                                                             \
    return take(s);                                                            \
  }

STRING_ACCESSOR(ig_key, key, 0)
OPTION_ACCESSOR(ig_namespace, namespace, 1)
STRING_ACCESSOR(ig_name, name, 2)
OPTION_ACCESSOR(ig_uid, uid, 3)
OPTION_ACCESSOR(ig_resource_version, resource_version, 4)
STRING_ACCESSOR(ig_api_version, api_version, 5)
STRING_ACCESSOR(ig_kind, kind, 6)
STRING_ACCESSOR(ig_json_text, json, -1)

const char *ig_label(ig_object obj, const char *key) {
  if (is_lendable(obj)) {
    size_t record;
    uint32_t count = labels_of(obj, &record);
    size_t len = strlen(key);
    for (uint32_t i = 0; i < count; i++) {
      size_t k = label_bound(record, 2 * (size_t)i), v = label_bound(record, 2 * (size_t)i + 1);
      if (k <= v && v <= batch.meta.len && v - k == len && memcmp(batch.meta.ptr + k, key, len) == 0) {
        return text_at(v, label_bound(record, 2 * (size_t)i + 2));
      }
    }
    return NULL;
  }
  batched_handler_string_t k, s;
  batched_handler_string_set(&k, key);
  if (!informer_host_plugin_types_method_object_label(borrow(obj), &k, &s)) return NULL;
  return take(s);
}

const char *ig_pointer(ig_object obj, const char *pointer) {
  batched_handler_string_t p, s;
  batched_handler_string_set(&p, pointer);
  if (!informer_host_plugin_types_method_object_pointer(borrow(obj), &p, &s)) return NULL;
  return take(s);
}

static size_t take_pairs(batched_handler_list_tuple2_string_string_t list, const ig_pair **pairs) {
  ig_pair *out = ig_alloc(list.len * sizeof *out);
  for (size_t i = 0; i < list.len; i++) {
    out[i].key = take(list.ptr[i].f0);
    out[i].value = take(list.ptr[i].f1);
  }
  if (list.len) free(list.ptr);
  *pairs = out;
  return list.len;
}

size_t ig_labels(ig_object obj, const ig_pair **pairs) {
  if (is_lendable(obj)) {
    size_t record;
    uint32_t count = labels_of(obj, &record);
    ig_pair *out = ig_alloc(count * sizeof *out);
    for (uint32_t i = 0; i < count; i++) {
      size_t k = label_bound(record, 2 * (size_t)i), v = label_bound(record, 2 * (size_t)i + 1);
      out[i].key = text_at(k, v);
      out[i].value = text_at(v, label_bound(record, 2 * (size_t)i + 2));
    }
    *pairs = out;
    return count;
  }
  batched_handler_list_tuple2_string_string_t list;
  informer_host_plugin_types_method_object_labels(borrow(obj), &list);
  return take_pairs(list, pairs);
}

size_t ig_annotations(ig_object obj, const ig_pair **pairs) {
  batched_handler_list_tuple2_string_string_t list;
  informer_host_plugin_types_method_object_annotations(borrow(obj), &list);
  return take_pairs(list, pairs);
}

const char *ig_deleted_key(const ig_deleted *obj) {
  return obj->is_tombstone ? obj->tombstone_key : ig_key(*obj->last_known);
}

const char *ig_deleted_name(const ig_deleted *obj) {
  if (obj->last_known) return ig_name(*obj->last_known);
  const char *key = ig_deleted_key(obj);
  const char *slash = strrchr(key, '/');
  return slash ? slash + 1 : key;
}

static const char *rv(const ig_object *obj) {
  const char *v = obj ? ig_resource_version(*obj) : NULL;
  return v ? v : "none";
}

const char *ig_describe_add(ig_object obj, bool is_in_initial_list) {
  return ig_format("add %s rv=%s initial=%s", ig_key(obj), rv(&obj), is_in_initial_list ? "true" : "false");
}

const char *ig_describe_update(ig_object old, ig_object new_) {
  return ig_format("update %s rv=%s->%s", ig_key(new_), rv(&old), rv(&new_));
}

const char *ig_describe_delete(const ig_deleted *obj) {
  return ig_format("%s %s rv=%s", obj->is_tombstone ? "delete-tombstone" : "delete", ig_deleted_key(obj),
                   rv(obj->last_known));
}

// ---- configuration --------------------------------------------------------

bool ig_config_is_empty(const ig_config *config) {
  for (const char *c = config->text; *c; c++) {
    if (*c != ' ' && *c != '\t' && *c != '\n' && *c != '\r') return false;
  }
  return true;
}

ig_result ig_config_parse(const ig_config *config, ig_json **settings) {
  const char *why = NULL;
  *settings = ig_json_parse(ig_config_is_empty(config) ? "{}" : config->text, &why);
  return *settings ? IG_OK : ig_error("invalid plugin configuration: %s", why);
}

// ---- the plugin's handler functions: defaults -----------------------------

__attribute__((weak)) ig_result ig_init(const ig_config *config) {
  (void)config;
  return IG_OK;
}

__attribute__((weak)) ig_result ig_on_add(ig_object obj, bool is_in_initial_list) {
  (void)obj;
  (void)is_in_initial_list;
  return IG_OK;
}

__attribute__((weak)) ig_result ig_on_update(ig_object old, ig_object new_) {
  (void)old;
  (void)new_;
  return IG_OK;
}

__attribute__((weak)) ig_result ig_on_delete(const ig_deleted *obj) {
  (void)obj;
  return IG_OK;
}

// ---- the component's exports ----------------------------------------------

// Hands a result to the canonical ABI (an `err` string is freed by the
// generated post-return function) and frees the call's arena.
static bool finish(ig_result result, batched_handler_string_t *err) {
  if (result) {
    size_t n = strlen(result);
    err->len = n;
    err->ptr = NULL;
    if (n) {
      err->ptr = malloc(n);
      if (!err->ptr) abort();
      memcpy(err->ptr, result, n);
    }
  }
  arena_reset();
  return result == IG_OK;
}

bool exports_informer_host_plugin_resource_event_handler_init(batched_handler_string_t *config, batched_handler_string_t *err) {
  ig_config c = {take(*config), config->len};
  return finish(ig_init(&c), err);
}

bool exports_informer_host_plugin_resource_event_handler_on_add(own_t obj, bool is_in_initial_list,
                                                                batched_handler_string_t *err) {
  ig_result r = ig_on_add((ig_object){obj.__handle}, is_in_initial_list);
  informer_host_plugin_types_object_drop_own(obj);
  return finish(r, err);
}

bool exports_informer_host_plugin_resource_event_handler_on_update(own_t old, own_t new_, batched_handler_string_t *err) {
  ig_result r = ig_on_update((ig_object){old.__handle}, (ig_object){new_.__handle});
  informer_host_plugin_types_object_drop_own(old);
  informer_host_plugin_types_object_drop_own(new_);
  return finish(r, err);
}

bool exports_informer_host_plugin_resource_event_handler_on_delete(informer_host_plugin_types_deleted_t *obj,
                                                                   batched_handler_string_t *err) {
  ig_object last;
  ig_deleted d = {false, NULL, NULL};
  bool owns = false;
  own_t own = {0};
  if (obj->tag == INFORMER_HOST_PLUGIN_TYPES_DELETED_OBJECT) {
    own = obj->val.object;
    owns = true;
  } else {
    informer_host_plugin_types_tombstone_t *t = &obj->val.unknown_final_state;
    d.is_tombstone = true;
    d.tombstone_key = take(t->key);
    if (t->last_known.is_some) {
      own = t->last_known.val;
      owns = true;
    }
  }
  if (owns) {
    last = (ig_object){own.__handle};
    d.last_known = &last;
  }
  ig_result r = ig_on_delete(&d);
  if (owns) informer_host_plugin_types_object_drop_own(own);
  return finish(r, err);
}

// The object in `slot` of the batch in flight.
static ig_object batch_object(uint32_t slot) { return (ig_object){-1 - (int32_t)slot}; }

void exports_informer_host_plugin_batch_handler_on_batch(batched_handler_list_u8_t *kinds,
                                                         batched_handler_list_string_t *tombstone_keys) {
  size_t slots = 0;
  for (size_t i = 0; i < kinds->len; i++) slots += kinds->ptr[i] == 2 ? 2 : 1;
  if (slots > batch.lent_cap) {
    free(batch.lent);
    batch.lent = malloc(slots * sizeof *batch.lent);
    if (!batch.lent) abort();
    batch.lent_cap = slots;
  }
  memset(batch.lent, 0, slots * sizeof *batch.lent);
  batch.slots = slots;
  batch.fetched = false;
  batch.decoded = batch.next_record = 0;
  batch.active = true;
  uint32_t slot = 0;
  size_t tombstones = 0;
  for (size_t i = 0; i < kinds->len; i++) {
    batch.index = (uint32_t)i;
    batch.begun = false;
    uint32_t first = slot;
    uint8_t kind = kinds->ptr[i];
    ig_result r;
    if (kind <= 1) {
      r = ig_on_add(batch_object(slot++), kind == 1);
    } else if (kind == 2) {
      ig_object old = batch_object(slot++);
      ig_object new_ = batch_object(slot++);
      r = ig_on_update(old, new_);
    } else if (kind == 3 || kind == 4) {
      ig_object last = batch_object(slot++);
      ig_deleted d = {kind == 4, &last, NULL};
      if (kind == 4) {
        if (tombstones < tombstone_keys->len) {
          batched_handler_string_t k = tombstone_keys->ptr[tombstones++];
          d.tombstone_key = ig_format("%.*s", (int)k.len, (const char *)k.ptr);
        } else {
          d.tombstone_key = "";
        }
      }
      r = ig_on_delete(&d);
    } else {
      r = ig_error("unknown notification kind %u from the host", (unsigned)kind);
    }
    for (uint32_t s = first; s < slot && s < slots; s++) {
      if (batch.lent[s]) informer_host_plugin_types_object_drop_own((own_t){batch.lent[s]});
      batch.lent[s] = 0;
    }
    if (batch.begun || r) {
      batched_handler_string_t err;
      if (r) batched_handler_string_set(&err, r);
      informer_host_plugin_delivery_done((uint32_t)i, r ? &err : NULL);
    }
    arena_reset();
  }
  batch.active = false;
  if (batch.fetched) batched_handler_list_u8_free(&batch.meta);
  batch.fetched = false;
  batched_handler_list_u8_free(kinds);
  batched_handler_list_string_free(tombstone_keys);
}
