/* A stand-in libcuda.so.1 for the doctor's tests: reports FAKE_DRIVER_VERSION and FAKE_GPUS
   devices of compute capability FAKE_CC_MAJOR.FAKE_CC_MINOR, and honours CUDA_VISIBLE_DEVICES
   as the real driver does (stops at the first entry that is not a valid index). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int visible_count(void) {
  const char* env = getenv("CUDA_VISIBLE_DEVICES");
  if (env == NULL) return FAKE_GPUS;
  int count = 0;
  const char* p = env;
  while (*p != '\0') {
    char* end = NULL;
    long index = strtol(p, &end, 10);
    if (end == p || index < 0 || index >= FAKE_GPUS) break;
    ++count;
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') break;
  }
  return count;
}

int cuDriverGetVersion(int* version) { *version = FAKE_DRIVER_VERSION; return 0; }
int cuInit(unsigned flags) { (void)flags; return visible_count() > 0 ? 0 : 100; }
int cuDeviceGetCount(int* count) { *count = visible_count(); return 0; }
int cuDeviceGet(int* device, int ordinal) {
  if (ordinal < 0 || ordinal >= visible_count()) return 101;
  *device = ordinal;
  return 0;
}
int cuDeviceGetName(char* name, int length, int device) { snprintf(name, (size_t)length, "Fake GPU %d", device); return 0; }
int cuDeviceTotalMem_v2(size_t* bytes, int device) { (void)device; *bytes = (size_t)80 << 30; return 0; }
int cuDeviceGetAttribute(int* value, int attribute, int device) {
  (void)device;
  if (attribute == 75) { *value = FAKE_CC_MAJOR; return 0; }
  if (attribute == 76) { *value = FAKE_CC_MINOR; return 0; }
  return 1;
}
int cuGetErrorString(int error, const char** text) {
  *text = error == 100 ? "no CUDA-capable device is detected" : "fake driver error";
  return 0;
}
