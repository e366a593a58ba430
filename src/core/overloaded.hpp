// Exhaustive visits: std::visit(Overloaded{[](const A&) {...}, [](const B&) {...}}, v)
// does not compile when an alternative of `v` has no handler, so a new message or
// action type cannot be silently ignored. Never add a catch-all `auto` handler.
#pragma once

namespace hmcast {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};
template <class... Fs>
Overloaded(Fs...) -> Overloaded<Fs...>;

}  // namespace hmcast
