// The C twin of the Rust `recorder` plugin: logs exactly one info line per
// notification, in the format of `describe`, and `init <config>` on init.
// With `{"throw_on": "<name>"}` it traps (like a Rust panic) on every
// notification about an object of that name; with `{"fail_on": "<name>"}` it
// returns an error for it instead.
#include <string.h>

#include "informer_guest.h"

static char *throw_on, *fail_on;

ig_result ig_init(const ig_config *config) {
  ig_info("init %s", config->text);
  ig_json *settings;
  ig_result err = ig_config_parse(config, &settings);
  if (err) return err;
  throw_on = ig_keep(ig_json_string(ig_json_get(settings, "throw_on")));
  fail_on = ig_keep(ig_json_string(ig_json_get(settings, "fail_on")));
  return IG_OK;
}

static ig_result check(const char *name) {
  if (throw_on && strcmp(name, throw_on) == 0) ig_trap("told to throw on %s", name);
  if (fail_on && strcmp(name, fail_on) == 0) return ig_error("told to fail on %s", name);
  return IG_OK;
}

ig_result ig_on_add(ig_object obj, bool is_in_initial_list) {
  ig_result err = check(ig_name(obj));
  if (err) return err;
  ig_log_str(IG_INFO, ig_describe_add(obj, is_in_initial_list));
  return IG_OK;
}

ig_result ig_on_update(ig_object old, ig_object new_) {
  ig_result err = check(ig_name(new_));
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
