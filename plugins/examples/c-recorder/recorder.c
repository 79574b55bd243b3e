// The C twin of the Rust `recorder` plugin: logs exactly one info line per
// notification, in the format of `describe`, and `init <config>` on init.
// With `{"throw_on": "<name>"}` it traps (like a Rust panic) on every
// notification about an object of that name; with `{"fail_on": "<name>"}` it
// returns an error for it instead; with `{"check_json": true}` it first
// returns an error unless the metadata accessors agree with the body.
#include <stdbool.h>
#include <string.h>

#include "informer_guest.h"

static char *throw_on, *fail_on;
static bool checks_json;

// Both NULL, or both the same text.
static bool same(const char *a, const char *b) { return a == b || (a && b && strcmp(a, b) == 0); }

static ig_result check_json(ig_object obj) {
  const char *error;
  ig_json *body = ig_parse(obj, &error);
  if (!body) return ig_error("decoding %s: %s", ig_key(obj), error);
  const ig_json *meta = ig_json_get(body, "metadata");
  const char *ns = ig_json_string(ig_json_get(meta, "namespace"));
  const char *name = ig_json_string(ig_json_get(meta, "name"));
  if (!same(ig_namespace(obj), ns) || !same(ig_name(obj), name) ||
      !same(ig_uid(obj), ig_json_string(ig_json_get(meta, "uid"))) ||
      !same(ig_resource_version(obj), ig_json_string(ig_json_get(meta, "resourceVersion")))) {
    return ig_error("the body of %s disagrees with its metadata", ig_key(obj));
  }
  const char *key = ig_key(obj);
  size_t ns_len = ns ? strlen(ns) : 0;
  bool key_ok = ns ? strncmp(key, ns, ns_len) == 0 && key[ns_len] == '/' && same(key + ns_len + 1, name)
                   : same(key, name);
  if (!key_ok) return ig_error("key %s disagrees with the body", key);
  const ig_json *body_labels = ig_json_get(meta, "labels");
  const ig_pair *labels;
  size_t count = ig_labels(obj, &labels);
  if (count != ig_json_len(body_labels)) {
    return ig_error("%s: %zu labels, %zu in the body", key, count, ig_json_len(body_labels));
  }
  for (size_t i = 0; i < count; i++) {
    const char *v = ig_json_string(ig_json_get(body_labels, labels[i].key));
    if (!same(labels[i].value, v) || !same(ig_label(obj, labels[i].key), v)) {
      return ig_error("%s: label %s disagrees with the body", key, labels[i].key);
    }
    if (i > 0 && strcmp(labels[i - 1].key, labels[i].key) >= 0) return ig_error("%s: labels out of order", key);
  }
  if (ig_label(obj, "no-such-label")) return ig_error("%s: a missing label was found", key);
  return IG_OK;
}

ig_result ig_init(const ig_config *config) {
  ig_info("init %s", config->text);
  ig_json *settings;
  ig_result err = ig_config_parse(config, &settings);
  if (err) return err;
  throw_on = ig_keep(ig_json_string(ig_json_get(settings, "throw_on")));
  fail_on = ig_keep(ig_json_string(ig_json_get(settings, "fail_on")));
  checks_json = ig_json_bool(ig_json_get(settings, "check_json"));
  return IG_OK;
}

static ig_result check(const char *name) {
  if (throw_on && strcmp(name, throw_on) == 0) ig_trap("told to throw on %s", name);
  if (fail_on && strcmp(name, fail_on) == 0) return ig_error("told to fail on %s", name);
  return IG_OK;
}

ig_result ig_on_add(ig_object obj, bool is_in_initial_list) {
  ig_result err = checks_json ? check_json(obj) : IG_OK;
  if (err) return err;
  err = check(ig_name(obj));
  if (err) return err;
  ig_log_str(IG_INFO, ig_describe_add(obj, is_in_initial_list));
  return IG_OK;
}

ig_result ig_on_update(ig_object old, ig_object new_) {
  ig_result err = checks_json ? check_json(new_) : IG_OK;
  if (err) return err;
  err = check(ig_name(new_));
  if (err) return err;
  ig_log_str(IG_INFO, ig_describe_update(old, new_));
  return IG_OK;
}

ig_result ig_on_delete(const ig_deleted *obj) {
  ig_result err = check(ig_deleted_name(obj));
  if (err) return err;
  ig_log_str(IG_INFO, ig_describe_delete(obj));
  return IG_OK;
}
