// An ordered map from sequence number to value for keys that lie close together:
// a ring of slots indexed by seq, grown (doubled) when the keys span more than it
// holds. A stream's held messages are such keys (a window's worth above the stable
// prefix), and a std::map of them cost a node allocation and a free per message
// and a pointer chase per lookup, on every member, for every message.
//
// The subset of std::map's interface the small path uses: find, count, at,
// emplace, lower_bound, upper_bound, begin/end and in-order iteration, plus
// erase_through() in place of erase(begin(), upper_bound(s)).
#pragma once

#include <bit>
#include <cstddef>
#include <optional>
#include <utility>
#include <vector>

#include "core/assert.hpp"
#include "hmcast/types.hpp"

namespace hmcast::small {

template <class T>
class SeqWindow {
 public:
  using value_type = std::pair<const Seq, T>;

  template <bool Const>
  class Iter {
   public:
    using Window = std::conditional_t<Const, const SeqWindow, SeqWindow>;
    using Value = std::conditional_t<Const, const value_type, value_type>;
    Iter() = default;
    Iter(Window* w, Seq key) : w_(w), key_(key) {}
    Value& operator*() const { return *w_->slot(key_); }
    Value* operator->() const { return &*w_->slot(key_); }
    Iter& operator++() {
      key_ = w_->next_key(key_ + 1);
      return *this;
    }
    bool operator==(const Iter& o) const { return key_ == o.key_; }
    operator Iter<true>() const requires(!Const) { return Iter<true>(w_, key_); }  // as std::map's iterators convert

   private:
    Window* w_ = nullptr;
    Seq key_ = kEnd;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] bool empty() const { return count_ == 0; }
  [[nodiscard]] std::size_t count(Seq s) const { return holds(s) ? 1 : 0; }

  iterator begin() { return {this, next_key(lo_)}; }
  const_iterator begin() const { return {this, next_key(lo_)}; }
  iterator end() { return {this, kEnd}; }
  const_iterator end() const { return {this, kEnd}; }

  iterator find(Seq s) { return {this, holds(s) ? s : kEnd}; }
  const_iterator find(Seq s) const { return {this, holds(s) ? s : kEnd}; }
  /// The first key at or above `s`, and above it.
  iterator lower_bound(Seq s) { return {this, next_key(s)}; }
  const_iterator lower_bound(Seq s) const { return {this, next_key(s)}; }
  iterator upper_bound(Seq s) { return {this, next_key(s + 1)}; }
  const_iterator upper_bound(Seq s) const { return {this, next_key(s + 1)}; }

  T& at(Seq s) {
    HMCAST_ASSERT(holds(s));
    return slot(s)->second;
  }
  const T& at(Seq s) const {
    HMCAST_ASSERT(holds(s));
    return slot(s)->second;
  }

  /// Adds `s` (which must not be there: callers drop duplicates first).
  void emplace(Seq s, T value) {
    HMCAST_ASSERT(s != kEnd && !holds(s));
    const Seq lo = count_ == 0 ? s : std::min(lo_, s);
    const Seq hi = count_ == 0 ? s : std::max(hi_, s);
    if (hi - lo >= slots_.size()) grow(hi - lo + 1);
    lo_ = lo;
    hi_ = hi;
    slot(s).emplace(s, std::move(value));
    ++count_;
  }

  /// Removes every key up to and including `s`.
  void erase_through(Seq s) {
    if (count_ == 0 || s < lo_) return;
    const Seq last = std::min(s, hi_);
    for (Seq k = lo_; k <= last && count_ > 0; ++k) {
      auto& v = slot(k);
      if (v.has_value()) {
        v.reset();
        --count_;
      }
    }
    lo_ = s + 1;
    if (count_ == 0) hi_ = 0;
  }

 private:
  static constexpr Seq kEnd = 0;  // no stream numbers a message 0

  std::optional<value_type>& slot(Seq s) { return slots_[s & (slots_.size() - 1)]; }
  const std::optional<value_type>& slot(Seq s) const { return slots_[s & (slots_.size() - 1)]; }

  [[nodiscard]] bool holds(Seq s) const {
    if (count_ == 0 || s < lo_ || s > hi_) return false;
    const auto& v = slot(s);
    HMCAST_ASSERT(!v.has_value() || v->first == s);  // keys in [lo_, hi_] have slots of their own
    return v.has_value();
  }

  /// The lowest key at or above `s`, or kEnd.
  [[nodiscard]] Seq next_key(Seq s) const {
    if (count_ == 0) return kEnd;
    for (Seq k = std::max(s, lo_); k <= hi_; ++k)
      if (slot(k).has_value()) return k;
    return kEnd;
  }

  void grow(Seq span) {
    std::vector<std::optional<value_type>> bigger(std::bit_ceil(std::max<std::size_t>(span, 2 * slots_.size())));
    if (count_ > 0)
      for (Seq k = lo_; k <= hi_; ++k)
        if (auto& v = slot(k); v.has_value()) bigger[k & (bigger.size() - 1)].emplace(k, std::move(v->second));
    slots_ = std::move(bigger);
  }

  std::vector<std::optional<value_type>> slots_ = std::vector<std::optional<value_type>>(16);
  Seq lo_ = 1;  // no key lies below (nor above hi_): hi_ - lo_ < slots_.size()
  Seq hi_ = 0;
  std::size_t count_ = 0;
};

}  // namespace hmcast::small
