// Owning device allocation; copies in and out checked.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "common/cuda_check.hpp"

namespace fp4moe {

namespace detail {
// Out of memory names the size asked for and what the device had free.
[[noreturn]] void throw_allocation_failure(cudaError_t err, size_t bytes);
}  // namespace detail

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) { resize(count); }
  explicit DeviceBuffer(const std::vector<T>& host) { upload(host); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr, o.count_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      ptr_ = o.ptr_, count_ = o.count_;
      o.ptr_ = nullptr, o.count_ = 0;
    }
    return *this;
  }

  void resize(size_t count) {
    if (count == count_) return;
    release();
    if (count) {
      const cudaError_t err = cudaMalloc(&ptr_, count * sizeof(T));
      if (err != cudaSuccess) ptr_ = nullptr, detail::throw_allocation_failure(err, count * sizeof(T));
    }
    count_ = count;
  }
  void upload(const std::vector<T>& host) {
    resize(host.size());
    if (count_) FP4MOE_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) FP4MOE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Done when it returns: cudaMemset may still be running after it returns, and
  // streams created non-blocking are not ordered after it.
  void fill_bytes(int byte) {
    if (!count_) return;
    FP4MOE_CUDA_CHECK(cudaMemset(ptr_, byte, count_ * sizeof(T)));
    FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  }
  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

 private:
  void release() {
    if (ptr_) cudaFree(ptr_);
    ptr_ = nullptr;
    count_ = 0;
  }
  T* ptr_ = nullptr;
  size_t count_ = 0;
};

}  // namespace fp4moe
