#include <gtest/gtest.h>

#include "measure/forward_timeline.hpp"

namespace fp4moe {
namespace {

KernelSpan span(const char* name, uint64_t start_ns, uint64_t end_ns, uint32_t correlation = 1) {
  return {name, start_ns, end_ns, correlation, 7, 132};
}

// route + permute, GEMM1 starting early (a dependent launch) over the route's tail,
// GEMM2 after a gap, finalize: times in ns.
ForwardSpans decode_forward(uint64_t t0) {
  ForwardSpans f;
  f.kernels = {span("void fp4moe::kernels::route_permute_kernel<8>(fp4moe::kernels::RouteArgs)", t0, t0 + 5000),
               span("void fp4moe::kernels::fp4_grouped_gemm_ws_kernel<Tile>(Params)", t0 + 4000, t0 + 40000),
               span("void fp4moe::kernels::fp4_grouped_gemm_ws_kernel<Tile>(Params)", t0 + 39000, t0 + 60000),
               span("void fp4moe::kernels::fp4_grouped_gemm_kernel<Tile>(Params)", t0 + 62000, t0 + 70000),
               span("void fp4moe::kernels::finalize_kernel(fp4moe::kernels::FinalizeArgs)", t0 + 70500, t0 + 73000)};
  return f;
}

TEST(ForwardTimeline, RampSpanAndTheTimeNoGemmRuns) {
  ForwardSpans f = decode_forward(1'000'000);
  f.launched = 1'000'000 - 3500;
  const ForwardFigures r = forward_figures(f, nullptr);
  EXPECT_DOUBLE_EQ(r.launch_to_first_kernel, 3.5);
  EXPECT_DOUBLE_EQ(r.launch_to_first_gemm, 7.5);
  EXPECT_DOUBLE_EQ(r.first_gemm, 4.0);
  EXPECT_DOUBLE_EQ(r.span, 73.0);
  // GEMMs cover 4..60 (the overlap of the two counted once) and 62..70: 64 of 73 us
  EXPECT_DOUBLE_EQ(r.outside_gemms, 9.0);
  EXPECT_LT(r.gap, 0);  // no previous forward
}

TEST(ForwardTimeline, AQueuedForwardHasAGapAndNoLaunchTime) {
  const ForwardSpans a = decode_forward(0), b = decode_forward(75000);
  const ForwardFigures r = forward_figures(b, &a);
  EXPECT_DOUBLE_EQ(r.gap, 2.0);
  EXPECT_LT(r.launch_to_first_kernel, 0);
  EXPECT_LT(r.launch_to_first_gemm, 0);
  EXPECT_DOUBLE_EQ(r.span, 73.0);
}

TEST(ForwardTimeline, AForwardWithoutGemmsIsAllOutside) {
  ForwardSpans f;
  f.kernels = {span("route_kernel", 100, 2100), span("finalize_kernel", 3100, 4100)};
  const ForwardFigures r = forward_figures(f, nullptr);
  EXPECT_DOUBLE_EQ(r.span, 4.0);
  EXPECT_DOUBLE_EQ(r.outside_gemms, 4.0);
  EXPECT_LT(r.first_gemm, 0);
  EXPECT_FALSE(reads_weights(f.kernels[0]));
  EXPECT_TRUE(reads_weights(decode_forward(0).kernels[1]));
}

TEST(ForwardTimeline, BackToBackForwardsSplitByTheirKernelCount) {
  std::vector<KernelSpan> all;
  for (int i = 0; i < 3; ++i)
    for (const KernelSpan& k : decode_forward(uint64_t(i) * 80000).kernels) all.push_back(k);
  const std::vector<ForwardSpans> fs = split_forwards(all, 5);
  ASSERT_EQ(fs.size(), 3u);
  EXPECT_EQ(fs[2].kernels.front().start, 160000u);
  EXPECT_DOUBLE_EQ(forward_figures(fs[1], &fs[0]).gap, 7.0);
  EXPECT_TRUE(split_forwards(all, 4).empty());  // 15 kernels are not forwards of 4
  EXPECT_TRUE(split_forwards(all, 0).empty());
  EXPECT_TRUE(forward_figures(ForwardSpans{}, nullptr).span == 0);
}

}  // namespace
}  // namespace fp4moe
