/* litenpu plugin-EP trampoline.
 *
 * onnxruntime dlopen()s this library (register_execution_provider_library) and calls the two
 * symbols every plugin EP library exports, CreateEpFactories and ReleaseEpFactory. The
 * execution provider itself is written in Python (provider/ort): the Python process loads this
 * same file with ctypes (dlopen returns the same handle, so the same globals) and installs its
 * two entry points with litenpu_set_entry_points(). provider.register() does that first; when
 * onnxruntime loads the library in a Python process that has not (plain onnxruntime code with
 * provider.get_library_path()), the library does it itself: it finds the running interpreter's
 * C API with dlsym, takes the GIL and calls provider.ort.discovery.install_entry_points with its
 * own path. The library never links against libpython, so it loads in any process; outside a
 * Python process it returns a status saying why there is no EP.
 *
 * No onnxruntime header is included: every onnxruntime type is opaque here. The only ABI fact
 * used is in the fallback path: OrtApiBase starts with GetApi(uint32_t), and slot 0 of OrtApi
 * is CreateStatus(OrtErrorCode, const char*) in every API version.
 *
 * Built by setup.py as a plain shared library (no Python module init; never imported).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define LITENPU_EXPORT __attribute__((visibility("default")))

typedef void *(*create_factories_fn)(const char *registered_name, const void *ort_api_base,
                                     const void *default_logger, void **factories,
                                     size_t max_factories, size_t *num_factories);
typedef void *(*release_factory_fn)(void *factory);

typedef struct {
  const void *(*GetApi)(uint32_t version);
  const char *(*GetVersionString)(void);
} api_base_prefix;

typedef void *(*create_status_fn)(int code, const char *message);

enum { ORT_FAIL_CODE = 1, OLDEST_PLUGIN_API_VERSION = 22 };

static create_factories_fn g_create_factories = NULL;
static release_factory_fn g_release_factory = NULL;

/* Installs (or, with NULLs, removes) the Python entry points. */
LITENPU_EXPORT void litenpu_set_entry_points(create_factories_fn create_factories,
                                             release_factory_fn release_factory) {
  g_create_factories = create_factories;
  g_release_factory = release_factory;
}

LITENPU_EXPORT int litenpu_has_entry_points(void) { return g_create_factories != NULL; }

/* The Python C API functions find_python_side calls, looked up in the running process.
 * PyObject* is void* here; PyGILState_STATE is an int-sized enum. */
typedef struct {
  int (*is_initialized)(void);
  int (*gil_ensure)(void);
  void (*gil_release)(int);
  void *(*import_module)(const char *);
  void *(*call_method)(void *, const char *, const char *, ...);
  void (*dec_ref)(void *);
  void (*err_fetch)(void **, void **, void **);
  void *(*object_str)(void *);
  const char *(*utf8)(void *);
  void (*err_clear)(void);
} python_api;

/* POSIX's way to store a dlsym result in a function pointer. */
#define PY_SYMBOL(field, name) \
  if ((*(void **)&py->field = dlsym(RTLD_DEFAULT, name)) == NULL) return 0

/* 1 when a Python interpreter runs in this process and *py holds its functions. */
static int load_python_api(python_api *py) {
  PY_SYMBOL(is_initialized, "Py_IsInitialized");
  PY_SYMBOL(gil_ensure, "PyGILState_Ensure");
  PY_SYMBOL(gil_release, "PyGILState_Release");
  PY_SYMBOL(import_module, "PyImport_ImportModule");
  PY_SYMBOL(call_method, "PyObject_CallMethod");
  PY_SYMBOL(dec_ref, "Py_DecRef");
  PY_SYMBOL(err_fetch, "PyErr_Fetch");
  PY_SYMBOL(object_str, "PyObject_Str");
  PY_SYMBOL(utf8, "PyUnicode_AsUTF8");
  PY_SYMBOL(err_clear, "PyErr_Clear");
  return py->is_initialized();
}

/* "Type: message" of the pending Python exception into why (the exception is cleared). */
static void python_error(const python_api *py, char *why, size_t size) {
  void *type = NULL, *value = NULL, *traceback = NULL;
  py->err_fetch(&type, &value, &traceback);
  void *text = value != NULL ? py->object_str(value) : NULL;
  const char *message = text != NULL ? py->utf8(text) : NULL;
  snprintf(why, size, "%s", message != NULL ? message : "an unprintable Python exception");
  py->err_clear(); /* from object_str or utf8 failing */
  if (text != NULL) py->dec_ref(text);
  if (type != NULL) py->dec_ref(type);
  if (value != NULL) py->dec_ref(value);
  if (traceback != NULL) py->dec_ref(traceback);
}

/* Installs the Python entry points from inside a Python process; 0 and why on failure. */
static int find_python_side(char *why, size_t size) {
  python_api py;
  if (!load_python_api(&py)) {
    snprintf(why, size,
             "this process runs no Python interpreter; the EP is written in Python: load the "
             "library from a Python process that can import litenpu");
    return 0;
  }
  Dl_info self;
  if (!dladdr(&g_create_factories, &self) || self.dli_fname == NULL) {
    snprintf(why, size, "the library cannot find its own path (dladdr failed)");
    return 0;
  }
  int gil = py.gil_ensure();
  void *module = py.import_module("provider.ort.discovery");
  void *result = module == NULL ? NULL
                                : py.call_method(module, "install_entry_points", "s",
                                                 self.dli_fname);
  if (result == NULL) {
    char error[768];
    python_error(&py, error, sizeof error);
    snprintf(why, size, "installing its Python side (provider.ort.discovery) failed: %s",
             error);
  }
  if (result != NULL) py.dec_ref(result);
  if (module != NULL) py.dec_ref(module);
  py.gil_release(gil);
  if (result != NULL && g_create_factories == NULL)
    snprintf(why, size, "provider.ort.discovery installed no entry points in %s",
             self.dli_fname);
  return g_create_factories != NULL;
}

LITENPU_EXPORT void *CreateEpFactories(const char *registered_name, const void *ort_api_base,
                                       const void *default_logger, void **factories,
                                       size_t max_factories, size_t *num_factories) {
  if (num_factories != NULL) *num_factories = 0;
  char why[1024];
  if (g_create_factories == NULL && !find_python_side(why, sizeof why)) {
    /* Report why instead of registering nothing silently. */
    const api_base_prefix *base = (const api_base_prefix *)ort_api_base;
    const void *const *api = (const void *const *)base->GetApi(OLDEST_PLUGIN_API_VERSION);
    if (api == NULL) return NULL;
    char message[1200];
    snprintf(message, sizeof message, "litenpu: no NPU execution provider: %s", why);
    return ((create_status_fn)api[0])(ORT_FAIL_CODE, message);
  }
  return g_create_factories(registered_name, ort_api_base, default_logger, factories,
                            max_factories, num_factories);
}

LITENPU_EXPORT void *ReleaseEpFactory(void *factory) {
  if (g_release_factory == NULL) return NULL;
  return g_release_factory(factory);
}
