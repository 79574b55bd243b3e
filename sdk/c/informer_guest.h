// C guest SDK for Informer Host plugins (clang --target=wasm32-wasi).
//
// A plugin is one C file that defines the handler functions it needs; the
// SDK exports the component functions and calls them (a function the plugin
// does not define is a no-op):
//
//   #include "informer_guest.h"
//
//   static char *prefix;
//
//   ig_result ig_init(const ig_config *config) {
//     ig_json *settings;
//     ig_result err = ig_config_parse(config, &settings);
//     if (err) return err;
//     const char *p = ig_json_string(ig_json_get(settings, "prefix"));
//     prefix = ig_keep(p ? p : "hello");
//     return IG_OK;
//   }
//
//   ig_result ig_on_add(ig_object obj, bool is_in_initial_list) {
//     ig_info("%s %s", prefix, ig_key(obj));
//     return IG_OK;
//   }
//
// built by `bash plugins/build-other-languages.sh` (plugins/c-<name>/*.c
// into target/plugins/other/c_<name>.wasm; the world is `batched-handler`:
// log only, and the host passes many notifications per call, which the SDK
// hands to these functions one by one).
//
// - Memory: every string, list and JSON value the SDK returns lives until the
//   handler function returns; then the SDK frees them all. Copy what must
//   outlive the call with `ig_keep`.
// - Errors: return `IG_OK` (NULL) for `ok`, or `ig_error("fmt", ...)` for
//   `err(message)`: the host logs and counts it.
// - Traps: `ig_trap("fmt", ...)` (or `abort()`, `__builtin_trap()`) traps the
//   instance, like a Rust panic: the host skips that notification, waits a
//   second and goes on with a fresh instance. The message goes to stderr,
//   which the host adds to its trap report.
// - Objects are host-owned (`ig_object`, valid during the call; in a batch,
//   metadata comes from one buffer per batch and the host's handle is only
//   taken for the body, then handed back when the function returns): `ig_key`,
//   `ig_name`, `ig_namespace`, `ig_resource_version`, `ig_label`, ... never
//   copy the body; `ig_json_text` returns it and `ig_parse` decodes it.
// - Logging: `ig_trace`, `ig_debug`, `ig_info`, `ig_warn`, `ig_error_log`,
//   printf-style, call the host's `log` import.
#ifndef INFORMER_GUEST_H
#define INFORMER_GUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IG_PRINTF(f, a) __attribute__((__format__(__printf__, f, a)))

// ---- results --------------------------------------------------------------

// What a handler function returns: NULL (`IG_OK`) or an error message.
typedef const char *ig_result;
#define IG_OK ((ig_result)0)

// `err(message)`, formatted like printf.
ig_result ig_error(const char *fmt, ...) IG_PRINTF(1, 2);

// Traps the instance (like a Rust panic), after writing the message to stderr.
_Noreturn void ig_trap(const char *fmt, ...) IG_PRINTF(1, 2);

// ---- memory ---------------------------------------------------------------

// A malloc'd copy of `s` (NULL for NULL) that outlives the call.
char *ig_keep(const char *s);
// Memory freed when the handler function returns.
void *ig_alloc(size_t size);
// A printf-formatted string freed when the handler function returns.
const char *ig_format(const char *fmt, ...) IG_PRINTF(1, 2);

// ---- logging --------------------------------------------------------------

typedef enum ig_level { IG_TRACE, IG_DEBUG, IG_INFO, IG_WARN, IG_ERROR } ig_level;

void ig_log(ig_level level, const char *fmt, ...) IG_PRINTF(2, 3);
// Sends `message` as it is (no formatting).
void ig_log_str(ig_level level, const char *message);
#define ig_trace(...) ig_log(IG_TRACE, __VA_ARGS__)
#define ig_debug(...) ig_log(IG_DEBUG, __VA_ARGS__)
#define ig_info(...) ig_log(IG_INFO, __VA_ARGS__)
#define ig_warn(...) ig_log(IG_WARN, __VA_ARGS__)
#define ig_error_log(...) ig_log(IG_ERROR, __VA_ARGS__)

// ---- objects --------------------------------------------------------------

// One immutable version of a Kubernetes object, owned by the host.
typedef struct ig_object {
  int32_t handle;
} ig_object;

typedef struct ig_pair {
  const char *key;
  const char *value;
} ig_pair;

// `namespace/name`, or `name` for a cluster-scoped object.
const char *ig_key(ig_object obj);
const char *ig_name(ig_object obj);
// NULL when the object has none (cluster-scoped; no uid; no version).
const char *ig_namespace(ig_object obj);
const char *ig_uid(ig_object obj);
const char *ig_resource_version(ig_object obj);
const char *ig_api_version(ig_object obj);
const char *ig_kind(ig_object obj);
// The value of one label, or NULL.
const char *ig_label(ig_object obj, const char *key);
// Every label (annotation): the count, and the pairs in `*pairs`.
size_t ig_labels(ig_object obj, const ig_pair **pairs);
size_t ig_annotations(ig_object obj, const ig_pair **pairs);
// The whole object as JSON text.
const char *ig_json_text(ig_object obj);
// The JSON text at an RFC 6901 pointer such as `/spec/replicas`, or NULL.
const char *ig_pointer(ig_object obj, const char *pointer);

// What `ig_on_delete` receives: the last known state, or a tombstone
// (client-go's `DeletedFinalStateUnknown`).
typedef struct ig_deleted {
  bool is_tombstone;
  // The deleted object, or a tombstone's last cached state (NULL if none).
  const ig_object *last_known;
  // A tombstone's key (NULL otherwise: use `ig_deleted_key`).
  const char *tombstone_key;
} ig_deleted;

const char *ig_deleted_key(const ig_deleted *obj);
// From the last known state, or else the part of the key after the namespace.
const char *ig_deleted_name(const ig_deleted *obj);

// One-line descriptions in the format of the Rust SDK's `describe` (the
// recorder plugins log exactly these lines).
const char *ig_describe_add(ig_object obj, bool is_in_initial_list);
const char *ig_describe_update(ig_object old, ig_object new_);
const char *ig_describe_delete(const ig_deleted *obj);

// ---- JSON -----------------------------------------------------------------

typedef enum ig_json_type {
  IG_JSON_NULL,
  IG_JSON_BOOL,
  IG_JSON_NUMBER,
  IG_JSON_STRING,
  IG_JSON_ARRAY,
  IG_JSON_OBJECT,
} ig_json_type;

typedef struct ig_json ig_json;

// Parses JSON text; on error returns NULL with a message in `*error`.
ig_json *ig_json_parse(const char *text, const char **error);
ig_json_type ig_json_kind(const ig_json *value);
// The member `key` of an object, or NULL (also when `value` is no object).
const ig_json *ig_json_get(const ig_json *value, const char *key);
// Arrays and objects: the number of elements (members) and the i-th one.
size_t ig_json_len(const ig_json *value);
const ig_json *ig_json_at(const ig_json *value, size_t i);
// An object's i-th member name.
const char *ig_json_key_at(const ig_json *value, size_t i);
// The string, or NULL when `value` is NULL or no string.
const char *ig_json_string(const ig_json *value);
double ig_json_number(const ig_json *value);
bool ig_json_bool(const ig_json *value);

// The whole object (its `ig_json_text`) decoded, or NULL with `*error` set.
ig_json *ig_parse(ig_object obj, const char **error);

// ---- the handler ----------------------------------------------------------

// The plugin's configuration: JSON text from the host.
typedef struct ig_config {
  const char *text;
  size_t len;
} ig_config;

// True when the host passed no configuration (empty or blank text).
bool ig_config_is_empty(const ig_config *config);
// Decodes the configuration (blank text as `{}`); an error reads
// `invalid plugin configuration: ...`.
ig_result ig_config_parse(const ig_config *config, ig_json **settings);

// Defined by the plugin, each optional (the SDK's defaults do nothing).
ig_result ig_init(const ig_config *config);
ig_result ig_on_add(ig_object obj, bool is_in_initial_list);
ig_result ig_on_update(ig_object old, ig_object new_);
ig_result ig_on_delete(const ig_deleted *obj);

#ifdef __cplusplus
}
#endif

#endif
