// Reads key, name, namespace, resource version and labels of every object
// and discards them: the benchmark for metadata-only handlers (the twin of
// the Rust `metadata` plugin).
#include "informer_guest.h"

static void read_metadata(ig_object obj) {
  const ig_pair *labels;
  const void *volatile sink;
  sink = ig_key(obj);
  sink = ig_name(obj);
  sink = ig_namespace(obj);
  sink = ig_resource_version(obj);
  ig_labels(obj, &labels);
  sink = labels;
  (void)sink;
}

ig_result ig_on_add(ig_object obj, bool is_in_initial_list) {
  (void)is_in_initial_list;
  read_metadata(obj);
  return IG_OK;
}

ig_result ig_on_update(ig_object old, ig_object new_) {
  (void)old;
  read_metadata(new_);
  return IG_OK;
}

ig_result ig_on_delete(const ig_deleted *obj) {
  const char *volatile sink = ig_deleted_key(obj);
  (void)sink;
  if (obj->last_known) read_metadata(*obj->last_known);
  return IG_OK;
}
