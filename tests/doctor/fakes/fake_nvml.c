/* A stand-in libnvidia-ml.so.1 for the doctor's and GpuMonitor's tests: FAKE_GPUS devices of
   compute capability FAKE_CC_MAJOR.FAKE_CC_MINOR, driver 580.65.06, every number a function of the
   device's index so tests can tell the devices apart. Like the real NVML it ignores
   CUDA_VISIBLE_DEVICES. FAKE_NVML_INIT_ERROR=<n> in the environment makes nvmlInit_v2 return n.
   Layouts as NVIDIA's nvml.h: nvmlMemory_t, nvmlUtilization_t, nvmlPciInfo_t. */
#include <stdio.h>
#include <stdlib.h>

typedef struct { unsigned long long total, free, used; } fake_memory;
typedef struct { unsigned int gpu, memory; } fake_utilization;
typedef struct {
  char bus_id_legacy[16];
  unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
  char bus_id[32];
} fake_pci_info;
typedef struct { int index; } fake_device;

static fake_device devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static int initialised = 0;

/* GPU i sits on PCI bus 0x17 + 0x4e * i: 0x17, 0x65, ... (NVML's order is bus order). */
static unsigned bus_of(int index) { return 0x17u + 0x4eu * (unsigned)index; }

int nvmlInit_v2(void) {
  const char* error = getenv("FAKE_NVML_INIT_ERROR");
  if (error != NULL) return atoi(error);
  ++initialised;
  return 0;
}
int nvmlShutdown(void) {
  if (initialised == 0) return 1; /* NVML_ERROR_UNINITIALIZED */
  --initialised;
  return 0;
}
const char* nvmlErrorString(int result) {
  switch (result) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 9: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}
int nvmlSystemGetDriverVersion(char* version, unsigned int length) {
  snprintf(version, length, "580.65.06");
  return 0;
}
int nvmlDeviceGetCount_v2(unsigned int* count) {
  if (initialised == 0) return 1;
  *count = FAKE_GPUS;
  return 0;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned int index, fake_device** device) {
  if (initialised == 0) return 1;
  if (index >= FAKE_GPUS) return 2; /* NVML_ERROR_INVALID_ARGUMENT */
  *device = &devices[index];
  return 0;
}
int nvmlDeviceGetName(fake_device* device, char* name, unsigned int length) {
  snprintf(name, length, "Fake GPU %d", device->index);
  return 0;
}
/* 80 GiB each; GPU i has (i + 1) * 1.5 GiB in use. */
int nvmlDeviceGetMemoryInfo(fake_device* device, fake_memory* memory) {
  memory->total = 80ull << 30;
  memory->used = (unsigned long long)(device->index + 1) * (3ull << 29);
  memory->free = memory->total - memory->used;
  return 0;
}
/* 35% busy, then 85%, ... */
int nvmlDeviceGetUtilizationRates(fake_device* device, fake_utilization* utilization) {
  utilization->gpu = 35u + 50u * (unsigned)device->index;
  utilization->memory = 10u;
  return 0;
}
/* 120.25 W, then 420.25 W, ...; GPU 3 and later report no power (NVML_ERROR_NOT_SUPPORTED). */
int nvmlDeviceGetPowerUsage(fake_device* device, unsigned int* milliwatts) {
  if (device->index >= 3) return 3;
  *milliwatts = 120250u + 300000u * (unsigned)device->index;
  return 0;
}
int nvmlDeviceGetCudaComputeCapability(fake_device* device, int* major, int* minor) {
  (void)device;
  *major = FAKE_CC_MAJOR;
  *minor = FAKE_CC_MINOR;
  return 0;
}
int nvmlDeviceGetPciInfo_v3(fake_device* device, fake_pci_info* pci) {
  unsigned bus = bus_of(device->index);
  snprintf(pci->bus_id_legacy, sizeof(pci->bus_id_legacy), "0000:%02X:00.0", bus);
  snprintf(pci->bus_id, sizeof(pci->bus_id), "00000000:%02X:00.0", bus);
  pci->domain = 0;
  pci->bus = bus;
  pci->device = 0;
  pci->pci_device_id = 0x233510de;
  pci->pci_subsystem_id = 0;
  return 0;
}
int nvmlDeviceGetUUID(fake_device* device, char* uuid, unsigned int length) {
  snprintf(uuid, length, "GPU-%08x-fake-4000-8000-00000000000%d", 0xabc00000u + (unsigned)device->index, device->index);
  return 0;
}
