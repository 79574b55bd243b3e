// The C guest SDK's JSON parser: ig_json values built in the per-call
// arena (ig_alloc), with errors naming line and column, and ig_parse for an
// object's JSON. It uses only the SDK's public functions (informer_guest.h).

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "informer_guest.h"

struct ig_json {
  ig_json_type type;
  bool boolean;
  double number;
  const char *string;
  size_t len;
  const ig_json **items;
  const char **keys;
};

typedef struct parser {
  const char *start, *p;
  const char *error;
  int depth;
} parser;

static void *fail(parser *ps, const char *what) {
  if (!ps->error) {
    int line = 1, column = 1;
    for (const char *c = ps->start; c < ps->p; c++) {
      if (*c == '\n') {
        line++;
        column = 1;
      } else {
        column++;
      }
    }
    ps->error = *ps->p ? ig_format("%s at line %d column %d", what, line, column)
                       : ig_format("%s: unexpected end of input at line %d column %d", what, line, column);
  }
  return NULL;
}

static void skip_ws(parser *ps) {
  while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r') ps->p++;
}

static ig_json *node(ig_json_type type) {
  ig_json *v = ig_alloc(sizeof *v);
  memset(v, 0, sizeof *v);
  v->type = type;
  return v;
}

static int hex4(const char *s) {
  int v = 0;
  for (int i = 0; i < 4; i++) {
    char c = s[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else return -1;
  }
  return v;
}

static char *utf8(char *out, unsigned cp) {
  if (cp < 0x80) {
    *out++ = (char)cp;
  } else if (cp < 0x800) {
    *out++ = (char)(0xC0 | cp >> 6);
    *out++ = (char)(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    *out++ = (char)(0xE0 | cp >> 12);
    *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *out++ = (char)(0x80 | (cp & 0x3F));
  } else {
    *out++ = (char)(0xF0 | cp >> 18);
    *out++ = (char)(0x80 | (cp >> 12 & 0x3F));
    *out++ = (char)(0x80 | (cp >> 6 & 0x3F));
    *out++ = (char)(0x80 | (cp & 0x3F));
  }
  return out;
}

// A string literal at ps->p (the opening quote).
static const char *parse_string(parser *ps) {
  ps->p++;
  const char *end = ps->p;
  while (*end && *end != '"') end += (*end == '\\' && end[1]) ? 2 : 1;
  // Decoded text is never longer than its literal.
  char *out = ig_alloc((size_t)(end - ps->p) + 1), *o = out;
  for (;;) {
    unsigned char c = (unsigned char)*ps->p;
    if (c == '"') break;
    if (c == '\0') return fail(ps, "EOF while parsing a string");
    if (c < 0x20) return fail(ps, "control character (\\u0000-\\u001F) found while parsing a string");
    if (c != '\\') {
      *o++ = (char)c;
      ps->p++;
      continue;
    }
    ps->p++;
    switch (*ps->p) {
      case '"': *o++ = '"'; break;
      case '\\': *o++ = '\\'; break;
      case '/': *o++ = '/'; break;
      case 'b': *o++ = '\b'; break;
      case 'f': *o++ = '\f'; break;
      case 'n': *o++ = '\n'; break;
      case 'r': *o++ = '\r'; break;
      case 't': *o++ = '\t'; break;
      case 'u': {
        int cp = hex4(ps->p + 1);
        if (cp < 0) return fail(ps, "invalid escape");
        ps->p += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
          int lo = (ps->p[1] == '\\' && ps->p[2] == 'u') ? hex4(ps->p + 3) : -1;
          if (lo < 0xDC00 || lo >= 0xE000) return fail(ps, "lone leading surrogate in hex escape");
          cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          ps->p += 6;
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          return fail(ps, "lone trailing surrogate in hex escape");
        }
        o = utf8(o, (unsigned)cp);
        break;
      }
      default: return fail(ps, "invalid escape");
    }
    ps->p++;
  }
  ps->p++;
  *o = '\0';
  return out;
}

static bool digits(parser *ps) {
  if (*ps->p < '0' || *ps->p > '9') return false;
  while (*ps->p >= '0' && *ps->p <= '9') ps->p++;
  return true;
}

static const ig_json *parse_value(parser *ps);

// Appends to a growing array of the arena (old buffers are freed with it).
static void push(void ***items, size_t *len, size_t *cap, void *item) {
  if (*len == *cap) {
    size_t grown = *cap ? 2 * *cap : 4;
    void **bigger = ig_alloc(grown * sizeof *bigger);
    if (*len) memcpy(bigger, *items, *len * sizeof *bigger);
    *items = bigger;
    *cap = grown;
  }
  (*items)[(*len)++] = item;
}

static const ig_json *parse_container(parser *ps, bool object) {
  if (++ps->depth > 128) return fail(ps, "recursion limit exceeded");
  ps->p++;
  ig_json *v = node(object ? IG_JSON_OBJECT : IG_JSON_ARRAY);
  size_t cap = 0, kcap = 0, klen = 0;
  char close = object ? '}' : ']';
  skip_ws(ps);
  if (*ps->p == close) {
    ps->p++;
    ps->depth--;
    return v;
  }
  for (;;) {
    skip_ws(ps);
    if (object) {
      if (*ps->p != '"') return fail(ps, "key must be a string");
      const char *key = parse_string(ps);
      if (!key) return NULL;
      skip_ws(ps);
      if (*ps->p != ':') return fail(ps, "expected `:`");
      ps->p++;
      push((void ***)&v->keys, &klen, &kcap, (void *)key);
    }
    const ig_json *item = parse_value(ps);
    if (!item) return NULL;
    push((void ***)&v->items, &v->len, &cap, (void *)item);
    skip_ws(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p == close) {
      ps->p++;
      ps->depth--;
      return v;
    }
    return fail(ps, object ? "expected `,` or `}`" : "expected `,` or `]`");
  }
}

static const ig_json *parse_value(parser *ps) {
  skip_ws(ps);
  const char *at = ps->p;
  switch (*at) {
    case '{': return parse_container(ps, true);
    case '[': return parse_container(ps, false);
    case '"': {
      const char *s = parse_string(ps);
      if (!s) return NULL;
      ig_json *v = node(IG_JSON_STRING);
      v->string = s;
      return v;
    }
    case 't':
    case 'f':
    case 'n': {
      static const char *words[] = {"true", "false", "null"};
      for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if (strncmp(at, words[i], n) == 0) {
          ps->p += n;
          ig_json *v = node(i == 2 ? IG_JSON_NULL : IG_JSON_BOOL);
          v->boolean = i == 0;
          return v;
        }
      }
      return fail(ps, "expected ident");
    }
    default: {
      if (*ps->p == '-') ps->p++;
      if (*ps->p == '0') {
        ps->p++;
      } else if (!digits(ps)) {
        ps->p = at;
        return fail(ps, "expected value");
      }
      if (*ps->p == '.') {
        ps->p++;
        if (!digits(ps)) return fail(ps, "invalid number");
      }
      if (*ps->p == 'e' || *ps->p == 'E') {
        ps->p++;
        if (*ps->p == '+' || *ps->p == '-') ps->p++;
        if (!digits(ps)) return fail(ps, "invalid number");
      }
      ig_json *v = node(IG_JSON_NUMBER);
      v->number = strtod(at, NULL);
      return v;
    }
  }
}

ig_json *ig_json_parse(const char *text, const char **error) {
  parser ps = {text, text, NULL, 0};
  const ig_json *v = parse_value(&ps);
  if (v) {
    skip_ws(&ps);
    if (*ps.p) v = fail(&ps, "trailing characters");
  }
  if (!v && error) *error = ps.error;
  return (ig_json *)v;
}

ig_json_type ig_json_kind(const ig_json *value) { return value ? value->type : IG_JSON_NULL; }

const ig_json *ig_json_get(const ig_json *value, const char *key) {
  if (!value || value->type != IG_JSON_OBJECT) return NULL;
  // The last of duplicate members wins, as in serde_json and Python.
  for (size_t i = value->len; i-- > 0;) {
    if (strcmp(value->keys[i], key) == 0) return value->items[i];
  }
  return NULL;
}

size_t ig_json_len(const ig_json *value) {
  return value && (value->type == IG_JSON_ARRAY || value->type == IG_JSON_OBJECT) ? value->len : 0;
}

const ig_json *ig_json_at(const ig_json *value, size_t i) { return i < ig_json_len(value) ? value->items[i] : NULL; }

const char *ig_json_key_at(const ig_json *value, size_t i) {
  return value && value->type == IG_JSON_OBJECT && i < value->len ? value->keys[i] : NULL;
}

const char *ig_json_string(const ig_json *value) {
  return value && value->type == IG_JSON_STRING ? value->string : NULL;
}

double ig_json_number(const ig_json *value) {
  return value && value->type == IG_JSON_NUMBER ? value->number : NAN;
}

bool ig_json_bool(const ig_json *value) { return value && value->type == IG_JSON_BOOL && value->boolean; }

ig_json *ig_parse(ig_object obj, const char **error) {
  const char *why = NULL;
  ig_json *v = ig_json_parse(ig_json_text(obj), &why);
  if (!v && error) *error = ig_format("cannot parse %s: %s", ig_key(obj), why);
  return v;
}
