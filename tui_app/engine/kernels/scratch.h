// Shared by every kernel: a buffer per thread reused across calls. Allocating three vectors per
// call cost more than the int kernels' rounding itself on the small layers; it grows to the largest
// call and is reused.
#pragma once

#include <cstddef>
#include <vector>

template <typename T>
inline T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}
