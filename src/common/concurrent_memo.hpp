// Values made once per key and shared by many threads: get() makes a key's
// value under the lock the first time it is asked for (a second asker waits
// for that one) and hands out shared ownership, so clear() never frees a
// value a caller still holds (a forward queued on one thread while another
// re-tunes keeps its plan alive). A make() that throws leaves no entry: the
// error reaches its caller and the next get() of the key makes it afresh.
// With a capacity, the least recently asked-for value is forgotten to make
// room (its holders keep it), and made again when it is next asked for.
#pragma once
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>

namespace fp4moe {

template <class Key, class Value>
class ConcurrentMemo {
 public:
  // capacity 0: every value is kept until clear()
  explicit ConcurrentMemo(size_t capacity = 0) : capacity_(capacity) {}

  template <class Make>
  std::shared_ptr<const Value> get(const Key& key, Make&& make) {
    const std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = values_.find(key); it != values_.end()) {
      recent_.splice(recent_.begin(), recent_, it->second.recent);  // now the most recent
      return it->second.value;
    }
    auto v = std::make_shared<const Value>(make(key));
    ++made_;
    if (capacity_ > 0) keep_most_recent(capacity_ - 1);  // room for it
    recent_.push_front(key);
    values_.emplace(key, Entry{v, recent_.begin()});
    return v;
  }
  // Forgets every value; the ones handed out live on with their holders.
  void clear() {
    const std::lock_guard<std::mutex> lock(mutex_);
    values_.clear();
    recent_.clear();
  }
  // Values held now.
  size_t size() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return values_.size();
  }
  // Values made so far, again after being forgotten included.
  int64_t made() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return made_;
  }
  size_t capacity() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return capacity_;
  }
  // A new capacity (0: unbounded); the least recent values beyond it are forgotten.
  void set_capacity(size_t capacity) {
    const std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity;
    if (capacity_ > 0) keep_most_recent(capacity_);
  }

 private:
  // Forgets the least recent values beyond the `n` most recent (the lock held).
  void keep_most_recent(size_t n) {
    while (values_.size() > n) {
      values_.erase(recent_.back());
      recent_.pop_back();
    }
  }
  struct Entry {
    std::shared_ptr<const Value> value;
    typename std::list<Key>::iterator recent;  // its place in recent_
  };
  size_t capacity_;
  mutable std::mutex mutex_;
  std::map<Key, Entry> values_;
  std::list<Key> recent_;  // most recently asked for first
  int64_t made_ = 0;
};

}  // namespace fp4moe
