// Replay files (fp4moe run --input/--output): input checks that name the
// tensor, the value and the first offending row; the CPU reference's replay;
// the output file written whole or not at all.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "checkpoint_test_util.hpp"
#include "io/replay.hpp"
#include "io/tensor_store.hpp"

namespace fp4moe::io {
namespace {

using test::TempDir;

struct Case {
  MoeConfig cfg = preset("deepseek-v3-small");
  MoeWeights w;
  int64_t T = 5;
  std::vector<float> x;
  Case() {
    w = random_moe_weights(cfg, Fp4Format::nvfp4, 3);
    std::mt19937_64 rng(4);
    std::normal_distribution<float> d(0.f, 1.f);
    x.resize(size_t(T * cfg.hidden));
    for (float& v : x) v = d(rng);
    w.router_weight.resize(size_t(cfg.num_experts * cfg.hidden));
    for (uint16_t& v : w.router_weight) v = bf16_from_float(d(rng) * 0.05f);
  }
};

void write_hidden(const std::string& path, const std::vector<float>& x, std::vector<int64_t> shape,
                  const std::vector<float>* logits = nullptr, std::vector<int64_t> logits_shape = {}) {
  std::vector<TensorToWrite> t{{"hidden_states", Dtype::F32, shape, x.data(), x.size() * 4}};
  if (logits) t.push_back({"router_logits", Dtype::F32, logits_shape, logits->data(), logits->size() * 4});
  write_safetensors(path, t);
}

TEST(ReplayInputs, ReadsBf16AndFp32HiddenStatesAndLogits) {
  TempDir dir;
  Case c;
  std::vector<uint16_t> bits(c.x.size());
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = bf16_from_float(c.x[i]);
  write_safetensors(dir / "b.safetensors", {{"hidden_states", Dtype::BF16, {1, c.T, c.cfg.hidden}, bits.data(), bits.size() * 2}});
  const ReplayInputs b = read_replay_inputs(dir / "b.safetensors", c.cfg);
  EXPECT_EQ(b.tokens, c.T) << "leading dimensions flattened";
  EXPECT_EQ(b.hidden_bf16, bits);
  EXPECT_TRUE(b.hidden_exact_in_bf16);
  EXPECT_TRUE(b.router_logits.empty());

  const std::vector<float> logits(size_t(c.T * c.cfg.num_experts), 0.5f);
  write_hidden(dir / "f.safetensors", c.x, {c.T, c.cfg.hidden}, &logits, {c.T, c.cfg.num_experts});
  const ReplayInputs f = read_replay_inputs(dir / "f.safetensors", c.cfg);
  EXPECT_EQ(f.hidden, c.x);
  EXPECT_FALSE(f.hidden_exact_in_bf16);
  EXPECT_EQ(f.hidden_bf16, bits);
  EXPECT_EQ(f.router_logits, logits);
}

TEST(ReplayInputs, BadInputsAreNamed) {
  TempDir dir;
  Case c;
  const int64_t H = c.cfg.hidden, E = c.cfg.num_experts;
  const std::string p = dir / "in.safetensors";
  write_safetensors(p, {{"x", Dtype::F32, {c.T, H}, c.x.data(), c.x.size() * 4}});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), p + ": no tensor 'hidden_states'");
  write_safetensors(p, {{"hidden_states", Dtype::I32, {c.T, H}, c.x.data(), c.x.size() * 4}});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "tensor 'hidden_states' in " + p + " has dtype I32, expected BF16 or F32");
  write_hidden(p, c.x, {c.T * 2, H / 2});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "has shape [10, 256]: its last dimension must be the layer's hidden size H = 512");
  write_hidden(p, {}, {0, H});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "no tokens");
  std::vector<float> bad = c.x;
  bad[size_t(3 * H + 17)] = INFINITY;
  bad[size_t(4 * H + 1)] = NAN;
  write_hidden(p, bad, {c.T, H});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "row 3 (the first with a non-finite value) has inf at column 17");

  std::vector<float> logits(size_t(c.T * (E + 1)), 0.f);
  write_hidden(p, c.x, {c.T, H}, &logits, {c.T, E + 1});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "has shape [5, 33], expected [T, E] with E = 32 experts");
  logits.resize(size_t((c.T - 1) * E));
  write_hidden(p, c.x, {c.T, H}, &logits, {c.T - 1, E});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "has shape [4, 32], expected [5, 32] (T = 5 tokens from hidden_states)");
  logits.assign(size_t(c.T * E), 0.f);
  logits[size_t(2 * E + 4)] = NAN;
  write_hidden(p, c.x, {c.T, H}, &logits, {c.T, E});
  EXPECT_ERROR_CONTAINS(read_replay_inputs(p, c.cfg), "tensor 'router_logits' in " + p + ": row 2 (the first with a non-finite value) has nan at column 4");
  EXPECT_ERROR_CONTAINS(read_replay_inputs(dir / "missing.safetensors", c.cfg), "cannot open");
}

TEST(ReplayReference, ComputesLogitsFromTheRouterWeightOrTakesThem) {
  TempDir dir;
  Case c;
  write_hidden(dir / "in.safetensors", c.x, {c.T, c.cfg.hidden});
  const ReplayInputs in = read_replay_inputs(dir / "in.safetensors", c.cfg);
  const ReferenceReplay r = replay_reference(c.cfg, c.w, in);
  EXPECT_TRUE(r.logits_computed);
  const std::vector<float> logits = router_logits_reference(c.x.data(), c.T, c.cfg.hidden, c.w.router_weight);
  const Routing want = route_reference(c.cfg, logits.data(), c.T, c.w.correction_bias);
  EXPECT_EQ(r.routing.topk_ids, want.topk_ids);
  EXPECT_EQ(r.output, moe_forward_reference(c.cfg, c.w, c.x.data(), c.T, want));

  MoeWeights no_router = c.w;
  no_router.router_weight.clear();
  EXPECT_ERROR_CONTAINS(replay_reference(c.cfg, no_router, in), "no tensor 'router_logits', and the layer has no router weight");
}

TEST(ReplayOutputs, WrittenWholeWithTheError) {
  TempDir dir;
  ReplayOutputs o;
  o.tokens = 2, o.hidden = 32, o.top_k = 2;
  o.output.assign(64, bf16_from_float(1.f));
  o.topk_ids = {0, 1, 2, 3};
  o.topk_weights = {.5f, .5f, .25f, .75f};
  o.checked = true;
  o.reference_output.assign(64, 1.f);
  o.reference_output[40] = 2.f;  // token 1 differs
  o.reference_topk_ids = o.topk_ids;
  o.reference_topk_weights = o.topk_weights;
  set_replay_error(o);
  EXPECT_EQ(o.error_per_token[0], 0.f);
  EXPECT_NEAR(o.error_per_token[1], 1.0 / std::sqrt(35.0), 1e-6);
  EXPECT_NEAR(o.error, 1.0 / std::sqrt(67.0), 1e-6);
  o.metadata = {{"device", "test"}};
  write_replay_outputs(dir / "out.safetensors", o);
  const TensorStore s = TensorStore::open(dir / "out.safetensors");
  EXPECT_EQ(s.names(), (std::vector<std::string>{"error", "error_per_token", "output", "reference_output", "reference_topk_ids",
                                                 "reference_topk_weights", "topk_ids", "topk_weights"}));
  EXPECT_EQ(s.get("output").info->dtype, Dtype::BF16);
  EXPECT_EQ(s.get("topk_ids").info->dtype, Dtype::I32);
  EXPECT_EQ(s.files()[0]->layout().metadata.at("device"), "test");

  // Inconsistent sizes fail before anything is written; an unwritable path leaves nothing.
  o.topk_ids.pop_back();
  EXPECT_ERROR_CONTAINS(write_replay_outputs(dir / "out2.safetensors", o), "tensor 'topk_ids' has 12 bytes, but I32 [2, 2] needs 16");
  o.topk_ids.push_back(3);
  EXPECT_ERROR_CONTAINS(write_replay_outputs(dir / "no/out.safetensors", o), "cannot write '" + (dir / "no/out.safetensors") + "'");
  EXPECT_EQ(test::entries(dir.path()), std::vector<std::string>{"out.safetensors"});
}

}  // namespace
}  // namespace fp4moe::io
