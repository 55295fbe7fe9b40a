/* A stand-in libnccl.so.2 reporting FAKE_NCCL_VERSION. */
int ncclGetVersion(int* version) { *version = FAKE_NCCL_VERSION; return 0; }
