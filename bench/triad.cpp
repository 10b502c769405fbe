// STREAM-like triad a[i] = b[i] + s·c[i] over three 128 MiB double arrays (far beyond
// the caches), split across N threads (default 2), best of several reps. Prints the
// bandwidth in GB/s counting 3 × 8 bytes per element (STREAM's convention: no
// write-allocate traffic). The decode roofline of docs/PERFORMANCE.md uses it.
//   g++ -O3 -march=native -pthread bench/triad.cpp -o triad && ./triad [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  const int n_threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t n = size_t{16} << 20;  // 16 Mi doubles = 128 MiB per array
  std::vector<double> a(n), b(n, 1.0), c(n, 2.0);
  auto run = [&](int t) {
    const size_t lo = n * t / n_threads, hi = n * (t + 1) / n_threads;
    for (size_t i = lo; i < hi; ++i) a[i] = b[i] + 3.0 * c[i];
  };
  // First touch by the owning thread, then timed reps.
  double best = 1e30;
  for (int rep = 0; rep < 8; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> th;
    for (int t = 1; t < n_threads; ++t) th.emplace_back(run, t);
    run(0);
    for (auto& x : th) x.join();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep > 0) best = std::min(best, s);
  }
  const double gbs = 3.0 * 8.0 * static_cast<double>(n) / best / 1e9;
  std::printf("triad threads=%d best=%.4f s bandwidth=%.1f GB/s check=%g\n", n_threads, best, gbs,
              a[n / 2]);
  return 0;
}
