// gpuwatch --fake-cuda: the two things a CPU-only torch lacks to run CUDA fake tensors through
// autograd. Built once per torch build by profilers/_fake_cuda.py and loaded with ctypes.
//
// * CUDA's device guard: c10's FakeGuardImpl (eight devices, a current device per thread).
//   Autograd sizes its device threads from it at the first backward of the process, so that
//   backward runs on a device thread as on a GPU, and device guards on "cuda" work.
// * CUDA's hooks saying CUDA is there: autograd asks the accelerator (at::getAccelerator) for
//   the current stream of each gradient's device. A CPU-only torch made its CUDA hooks, once,
//   as a bare at::CUDAHooksInterface (no data members, only a vtable pointer); FakeCudaHooks is
//   that class with a few answers changed and nothing added, constructed over it in place while
//   --fake-cuda is on and the plain interface constructed back after. Nothing else is touched.
#include <ATen/detail/CUDAHooksInterface.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/impl/FakeGuardImpl.h>

#include <new>
#include <typeinfo>

namespace {

int g_devices = 1;

struct FakeCudaHooks final : at::CUDAHooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return true; }
  bool hasCUDA() const override { return true; }
  bool hasPrimaryContext(c10::DeviceIndex /*device_index*/) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(g_devices);
  }
  int getNumGPUs() const override { return g_devices; }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex /*device_index*/) const override {
    return at::detail::getDefaultCPUGenerator();
  }
};

static_assert(sizeof(FakeCudaHooks) == sizeof(at::CUDAHooksInterface),
              "FakeCudaHooks must add no state to the interface it is built over");

at::CUDAHooksInterface* plain_hooks() {
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  auto* p = const_cast<at::CUDAHooksInterface*>(&hooks);
  if (typeid(*p) == typeid(at::CUDAHooksInterface) || typeid(*p) == typeid(FakeCudaHooks)) {
    return p;
  }
  return nullptr;  // a CUDA build's own hooks: never replaced
}

}  // namespace

// 1: the fake guard is CUDA's guard now (or already was); 2: a real CUDA guard with devices is
// there (a CUDA build on a machine with a GPU) and stays.
extern "C" int gpuwatch_install_fake_cuda_guard() {
  static c10::impl::FakeGuardImpl<c10::DeviceType::CUDA> impl;
  if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
    const auto* current = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    if (current == &impl) {
      return 1;
    }
    if (current->deviceCount() > 0) {
      return 2;
    }
  }
  c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::CUDA, &impl);
  return 1;
}

// 1: the hooks now say CUDA is there, with `devices` GPUs; 0: this torch has hooks of its own.
extern "C" int gpuwatch_fake_cuda_hooks_on(int devices) {
  at::CUDAHooksInterface* p = plain_hooks();
  if (p == nullptr) {
    return 0;
  }
  g_devices = devices;
  if (typeid(*p) != typeid(FakeCudaHooks)) {
    new (p) FakeCudaHooks();
  }
  return 1;
}

extern "C" int gpuwatch_fake_cuda_hooks_off() {
  at::CUDAHooksInterface* p = plain_hooks();
  if (p == nullptr) {
    return 0;
  }
  if (typeid(*p) == typeid(FakeCudaHooks)) {
    new (p) at::CUDAHooksInterface();
  }
  return 1;
}
