/* A stand-in libcudart.so.13 reporting FAKE_RUNTIME_VERSION. */
int cudaRuntimeGetVersion(int* version) { *version = FAKE_RUNTIME_VERSION; return 0; }
