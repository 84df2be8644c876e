#include "kernel_trace.hpp"

#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "fp4moe/error.hpp"

namespace fp4moe::bench {
namespace {

#define FP4MOE_CUPTI_CHECK(expr)                                                                \
  do {                                                                                          \
    const CUptiResult r_ = (expr);                                                              \
    if (r_ != CUPTI_SUCCESS) {                                                                  \
      const char* s_ = nullptr;                                                                 \
      cuptiGetResultString(r_, &s_);                                                            \
      throw Error(std::string("CUPTI: ") + #expr + " failed: " + (s_ ? s_ : "unknown error"));  \
    }                                                                                           \
  } while (0)

// CUPTI hands records over in buffers on its own thread: the completed spans wait here.
std::mutex g_mutex;
std::vector<KernelSpan> g_spans;
size_t g_dropped = 0;

constexpr size_t kBufferBytes = size_t(8) << 20;

std::string demangled(const char* name) {
  if (!name) return "?";
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && d ? std::string(d.get()) : std::string(name);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // CUPTI wants 8-byte aligned buffers
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelSpan> got;
  CUpti_Activity* record = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.push_back({demangled(k->name), k->start, k->end, k->correlationId, k->streamId,
                   int64_t(k->gridX) * k->gridY * k->gridZ});
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(context, stream, &dropped);
  std::free(buffer);
  const std::lock_guard<std::mutex> lock(g_mutex);
  g_spans.insert(g_spans.end(), got.begin(), got.end());
  g_dropped += dropped;
}

}  // namespace

KernelTrace::KernelTrace() {
  static const bool registered = [] {  // once per process
    FP4MOE_CUPTI_CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    return true;
  }();
  (void)registered;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);  // what an earlier trace flushed last is not this one's
    g_spans.clear();
    g_dropped = 0;
  }
  FP4MOE_CUPTI_CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
}

KernelTrace::~KernelTrace() {
  cuptiActivityFlushAll(1);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
}

std::vector<KernelSpan> KernelTrace::take() {
  FP4MOE_CUPTI_CHECK(cuptiActivityFlushAll(1));  // forced: the buffers in use are handed over too
  std::vector<KernelSpan> out;
  {
    const std::lock_guard<std::mutex> lock(g_mutex);
    out.swap(g_spans);
  }
  std::sort(out.begin(), out.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start < b.start; });
  return out;
}

uint64_t KernelTrace::now() {
  uint64_t t = 0;
  FP4MOE_CUPTI_CHECK(cuptiGetTimestamp(&t));
  return t;
}

size_t KernelTrace::dropped() const {
  const std::lock_guard<std::mutex> lock(g_mutex);
  return g_dropped;
}

}  // namespace fp4moe::bench
