/* A stand-in libcublas.so.13 reporting version FAKE_CUBLAS_VERSION (major * 10000 + minor * 100 + patch). */
int cublasGetProperty(int type, int* value) {
  const int parts[3] = {FAKE_CUBLAS_VERSION / 10000, FAKE_CUBLAS_VERSION % 10000 / 100, FAKE_CUBLAS_VERSION % 100};
  if (type < 0 || type > 2) return 7;
  *value = parts[type];
  return 0;
}
