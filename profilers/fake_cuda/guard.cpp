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
//   --fake-cuda is on and the plain interface constructed back after.
// * A CUDA build (what pip installs on Linux) made its hooks as at::cuda::detail::CUDAHooks,
//   which asks the CUDA runtime (no GPU: "no NVIDIA driver"). While --fake-cuda is on, that
//   object's vtable pointer is FakeCudaHooks's (FakeCudaHooks reads no state, so the object's
//   own members are never read), and its own vtable pointer goes back after. On a machine whose
//   CUDA guard sees real GPUs, the fake guard takes the registry's CUDA entry while the harness is
//   on and the real guard is put back after, so no real GPU is touched.
// Nothing else is changed.
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

at::CUDAHooksInterface* the_hooks() {
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  return const_cast<at::CUDAHooksInterface*>(&hooks);
}

// The vtable pointer is the first word of an object of a class with virtual functions and
// single inheritance (Itanium C++ ABI, which gcc and clang follow on Linux).
void* vtable_of(const void* object) { return *static_cast<void* const*>(object); }
void set_vtable(void* object, void* vtable) { *static_cast<void**>(object) = vtable; }

void* fake_hooks_vtable() {
  static const FakeCudaHooks model;
  return vtable_of(&model);
}

void* g_own_hooks_vtable = nullptr;  // a CUDA build's hooks' own vtable while ours is in place
const c10::impl::DeviceGuardImplInterface* g_real_guard = nullptr;  // while the fake one is in

c10::impl::FakeGuardImpl<c10::DeviceType::CUDA>& fake_guard() {
  static c10::impl::FakeGuardImpl<c10::DeviceType::CUDA> impl;
  return impl;
}

}  // namespace

// 1: the fake guard is CUDA's guard now (or already was); 2: a real CUDA guard with devices is
// there (a CUDA build on a machine with a GPU) and stays.
// A CPU-only torch, or a CUDA build that sees no GPU (its guard says 0 devices), gets the fake
// guard for good: nothing there could use another. A CUDA build that sees GPUs keeps its own
// (returns 2) and lends the entry to the fake one only while the harness is on (guard_on/off).
extern "C" int gpuwatch_install_fake_cuda_guard() {
  auto* impl = &fake_guard();
  if (c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) {
    const auto* current = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
    if (current == impl) {
      return 1;
    }
    if (current->deviceCount() > 0) {
      return 2;
    }
  }
  c10::impl::DeviceGuardImplRegistrar registrar(c10::DeviceType::CUDA, impl);
  return 1;
}

// The fake guard takes CUDA's entry from a real one (GPUs present) until guard_off.
extern "C" int gpuwatch_fake_cuda_guard_on() {
  auto* impl = &fake_guard();
  auto& entry = c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::DeviceType::CUDA)];
  const auto* current = entry.load();
  if (current != impl) {
    g_real_guard = current;
    entry.store(impl);
  }
  return 1;
}

extern "C" int gpuwatch_fake_cuda_guard_off() {
  auto& entry = c10::impl::device_guard_impl_registry[static_cast<size_t>(c10::DeviceType::CUDA)];
  if (g_real_guard != nullptr && entry.load() == &fake_guard()) {
    entry.store(g_real_guard);
    g_real_guard = nullptr;
  }
  return 1;
}

// The hooks say CUDA is there, with `devices` GPUs: 1 over a CPU-only torch's bare interface,
// 2 over a CUDA build's own hooks (their vtable kept to give back).
extern "C" int gpuwatch_fake_cuda_hooks_on(int devices) {
  at::CUDAHooksInterface* p = the_hooks();
  g_devices = devices;
  if (typeid(*p) == typeid(FakeCudaHooks)) {
    return g_own_hooks_vtable != nullptr ? 2 : 1;
  }
  if (typeid(*p) == typeid(at::CUDAHooksInterface)) {
    new (p) FakeCudaHooks();
    return 1;
  }
  g_own_hooks_vtable = vtable_of(p);
  set_vtable(p, fake_hooks_vtable());
  return 2;
}

extern "C" int gpuwatch_fake_cuda_hooks_off() {
  at::CUDAHooksInterface* p = the_hooks();
  if (typeid(*p) != typeid(FakeCudaHooks)) {
    return 1;
  }
  if (g_own_hooks_vtable != nullptr) {
    set_vtable(p, g_own_hooks_vtable);
    g_own_hooks_vtable = nullptr;
  } else {
    new (p) at::CUDAHooksInterface();
  }
  return 1;
}
