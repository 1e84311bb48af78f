// The tvm-ffi peer of the launch benchmark: a function exported through apache-tvm-ffi's C ABI
// (the vehicle CuTe DSL, TileLang and FlashInfer launch through) that reads two tensors, takes
// the caller's current stream from tvm-ffi's environment (set from torch's DLPack exchange table
// on each call) and launches the benchmark's empty kernel with cuLaunchKernel. libcuda is reached
// through a function pointer handed over once, so no CUDA headers are needed to build it.
#include <cstdint>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

namespace {
using launch_fn = int (*)(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                          unsigned smem, void* stream, void** params, void** extra);
launch_fn g_launch = nullptr;
void* g_kernel = nullptr;

void bind(int64_t launch, int64_t kernel) {
  g_launch = reinterpret_cast<launch_fn>(launch);
  g_kernel = reinterpret_cast<void*>(kernel);
}

void empty(tvm::ffi::TensorView x, tvm::ffi::TensorView y, int32_t n) {
  TVM_FFI_ICHECK(g_launch != nullptr) << "call bind() first";
  void* stream = TVMFFIEnvGetStream(x.device().device_type, x.device().device_id);
  void* xp = x.data_ptr();
  void* yp = y.data_ptr();
  void* params[] = {&xp, &yp, &n};
  int err = g_launch(g_kernel, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
  TVM_FFI_ICHECK(err == 0) << "cuLaunchKernel failed: CUresult " << err;
}
}  // namespace

TVM_FFI_DLL_EXPORT_TYPED_FUNC(bind, bind);
TVM_FFI_DLL_EXPORT_TYPED_FUNC(empty, empty);
