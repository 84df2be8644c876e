// The permutation kernel against a host counting sort: routed rows by expert
// (ascending pair index inside one), the layer's range of held experts, ids of
// -1 and out of range dropped, and the shared expert's rows after the routed
// ones when it runs among them (PermuteArgs::shared_rows).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/cuda_check.hpp"
#include "gpu_test_util.hpp"
#include "kernels/routing_kernels.hpp"
#include "runtime/device_buffer.hpp"

namespace fp4moe {
namespace {

struct Permuted {
  std::vector<int32_t> offsets, pair, token, pair_pos;
  int32_t status = 0;
};

// T tokens x k ids of `global` experts, the layer holding [begin, begin + held);
// `rows` the arrays' length (at least T k + shared).
Permuted run_permute(const std::vector<int32_t>& ids, int64_t T, int k, int global, int begin, int held,
                     int64_t shared, int64_t rows) {
  DeviceBuffer<int32_t> d_ids{ids}, offsets{size_t(held + 2)}, pair{size_t(rows)}, token{size_t(rows)},
      pair_pos{size_t(T * k)}, status{size_t(kernels::kStatusWords)};
  for (auto* b : {&offsets, &pair, &token, &pair_pos}) b->fill_bytes(0x7F);  // poison: what is read back was written
  status.fill_bytes(0);
  kernels::PermuteArgs a;
  a.topk_ids = d_ids.get();
  a.tokens = T, a.experts = held, a.top_k = k, a.expert_begin = begin, a.global_experts = global;
  a.expert_offsets = offsets.get(), a.permuted_pair = pair.get(), a.permuted_token = token.get();
  a.pair_pos = pair_pos.get(), a.shared_rows = shared, a.status = status.get();
  kernels::launch_permute(a, nullptr);
  FP4MOE_CUDA_CHECK(cudaDeviceSynchronize());
  Permuted p{offsets.download(), pair.download(), token.download(), pair_pos.download(), status.download()[0]};
  p.offsets.resize(size_t(held + (shared > 0 ? 2 : 1)));
  return p;
}

TEST(GpuPermute, SharedRowsFollowTheRoutedRows) {
  FP4MOE_REQUIRE_GPU();
  const int k = 4, global = 40, begin = 8, held = 24;
  for (const int64_t T : {1, 3, 37, 300}) {
    std::mt19937 rng{uint32_t(T)};
    std::vector<int32_t> ids(size_t(T * k));
    for (size_t q = 0; q < ids.size(); ++q) {
      const int r = int(rng() % 50);
      ids[q] = r < 2 ? -1 : r < 4 ? global + r : int(rng() % global);  // some -1, some out of range
    }
    const int64_t P = T * k, rows = P + T;
    // the host's counting sort over the held experts
    std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(held));
    bool bad = false;
    for (int64_t q = 0; q < P; ++q) {
      const int id = ids[size_t(q)];
      bad |= id != -1 && (id < 0 || id >= global);
      if (id >= begin && id < begin + held) by_expert[size_t(id - begin)].push_back(int32_t(q));
    }
    int32_t kept = 0;
    for (const auto& v : by_expert) kept += int32_t(v.size());

    const Permuted without = run_permute(ids, T, k, global, begin, held, 0, rows);
    const Permuted with = run_permute(ids, T, k, global, begin, held, T, rows);
    for (const Permuted* p : {&without, &with}) {
      EXPECT_EQ(p->status != 0, bad) << "T=" << T;
      int32_t row = 0;
      for (int e = 0; e < held; ++e) {
        ASSERT_EQ(p->offsets[size_t(e)], row) << "T=" << T << " expert " << e;
        for (const int32_t q : by_expert[size_t(e)]) {
          ASSERT_EQ(p->pair[size_t(row)], q) << "T=" << T << " row " << row;
          ASSERT_EQ(p->token[size_t(row)], q / k) << "T=" << T << " row " << row;
          ASSERT_EQ(p->pair_pos[size_t(q)], row) << "T=" << T << " pair " << q;
          ++row;
        }
      }
      ASSERT_EQ(p->offsets[size_t(held)], kept) << "T=" << T;
      for (int64_t q = 0; q < P; ++q) {
        const int id = ids[size_t(q)];
        if (id < begin || id >= begin + held) {
          EXPECT_EQ(p->pair_pos[size_t(q)], -1) << "T=" << T << " pair " << q;
        }
      }
    }
    // the shared expert: held expert `held`, token t at row kept + t, no pair
    ASSERT_EQ(with.offsets[size_t(held) + 1], kept + T) << "T=" << T;
    for (int64_t t = 0; t < T; ++t) {
      EXPECT_EQ(with.token[size_t(kept + t)], t) << "T=" << T;
      EXPECT_EQ(with.pair[size_t(kept + t)], -1) << "T=" << T;
    }
    // the rows past them (up to the arrays' T k + T): pair -1, token 0, for a row copy of every row
    for (int64_t r = kept + T; r < rows; ++r) {
      EXPECT_EQ(with.pair[size_t(r)], -1) << "T=" << T << " row " << r;
      EXPECT_EQ(with.token[size_t(r)], 0) << "T=" << T << " row " << r;
    }
    for (int64_t r = kept; r < P; ++r) {
      EXPECT_EQ(without.pair[size_t(r)], -1) << "T=" << T << " row " << r;
      EXPECT_EQ(without.token[size_t(r)], 0) << "T=" << T << " row " << r;
    }
  }
}

TEST(GpuPermute, SharedRowsAreCheckedBeforeLaunch) {
  kernels::PermuteArgs a;
  a.tokens = 4, a.experts = 8, a.top_k = 2, a.shared_rows = 5;
  int32_t dummy = 0;
  a.topk_ids = a.expert_offsets = a.permuted_pair = a.permuted_token = a.pair_pos = a.status = &dummy;
  try {
    kernels::launch_permute(a, nullptr);
    FAIL() << "shared_rows above tokens was launched";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("shared_rows = 5"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4moe
