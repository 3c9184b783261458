/* litenpu plugin-EP trampoline.
 *
 * onnxruntime dlopen()s this library (register_execution_provider_library) and calls the two
 * symbols every plugin EP library exports, CreateEpFactories and ReleaseEpFactory. The
 * execution provider itself is written in Python (provider/ort): the Python process loads this
 * same file with ctypes first (dlopen returns the same handle, so the same globals) and installs
 * its two entry points with litenpu_set_entry_points().
 *
 * No onnxruntime header is included: every onnxruntime type is opaque here. The only ABI fact
 * used is in the fallback path: OrtApiBase starts with GetApi(uint32_t), and slot 0 of OrtApi
 * is CreateStatus(OrtErrorCode, const char*) in every API version.
 *
 * Built by setup.py as a plain shared library (no Python module init; never imported).
 */
#include <stddef.h>
#include <stdint.h>

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

LITENPU_EXPORT void *CreateEpFactories(const char *registered_name, const void *ort_api_base,
                                       const void *default_logger, void **factories,
                                       size_t max_factories, size_t *num_factories) {
  if (num_factories != NULL) *num_factories = 0;
  if (g_create_factories == NULL) {
    /* Loaded without the Python side (e.g. by a process that never imported provider):
     * report why instead of registering nothing silently. */
    const api_base_prefix *base = (const api_base_prefix *)ort_api_base;
    const void *const *api = (const void *const *)base->GetApi(OLDEST_PLUGIN_API_VERSION);
    if (api == NULL) return NULL;
    return ((create_status_fn)api[0])(
        ORT_FAIL_CODE,
        "litenpu: the NPU execution provider library must be registered through "
        "provider.register() in a Python process that imported litenpu");
  }
  return g_create_factories(registered_name, ort_api_base, default_logger, factories,
                            max_factories, num_factories);
}

LITENPU_EXPORT void *ReleaseEpFactory(void *factory) {
  if (g_release_factory == NULL) return NULL;
  return g_release_factory(factory);
}
