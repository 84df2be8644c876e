// Values made once per key and shared by many threads: get() makes a key's
// value under the lock the first time it is asked for (a second asker waits
// for that one) and hands out shared ownership, so clear() never frees a
// value a caller still holds (a forward queued on one thread while another
// re-tunes keeps its plan alive). A make() that throws leaves no entry: the
// error reaches its caller and the next get() of the key makes it afresh.
#pragma once
#include <map>
#include <memory>
#include <mutex>

namespace fp4moe {

template <class Key, class Value>
class ConcurrentMemo {
 public:
  template <class Make>
  std::shared_ptr<const Value> get(const Key& key, Make&& make) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = values_.find(key); it != values_.end()) return it->second;
    auto v = std::make_shared<const Value>(make(key));
    values_.emplace(key, v);
    return v;
  }
  // Forgets every value; the ones handed out live on with their holders.
  void clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    values_.clear();
  }
  size_t size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return values_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::map<Key, std::shared_ptr<const Value>> values_;
};

}  // namespace fp4moe
