// Checkpoints and replay on the GPU: a layer saved as a ModelOpt NVFP4
// checkpoint and loaded back runs on MoeLayer like the CPU reference, and
// `fp4moe run --checkpoint DIR --layer L --input IN --output OUT [--check]`
// (the CLI, run as a process) writes what the reference computes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>

#include "fp4moe/reference.hpp"
#include "fp4moe/checkpoint.hpp"
#include "fp4moe/layer.hpp"
#include "gpu_test_util.hpp"
#include "io/safetensors.hpp"
#include "io/tensor_store.hpp"
#include "runtime/device_buffer.hpp"

#ifndef FP4MOE_CLI_PATH
#error "FP4MOE_CLI_PATH (the fp4moe executable) is set by tests/CMakeLists.txt"
#endif

namespace fp4moe {
namespace {

namespace fs = std::filesystem;
constexpr int64_t kLayer = 3;

struct Scratch {
  fs::path dir;
  Scratch() {
    std::string t = (fs::temp_directory_path() / "fp4moe-gpu-replay-XXXXXX").string();
    dir = mkdtemp(t.data());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

// A layer with a router weight, saved as a checkpoint under `dir`.
MoeCheckpointLayer save_sample(const std::string& preset_name, const std::string& dir, uint64_t seed) {
  MoeCheckpointLayer l;
  l.config = preset(preset_name);
  l.layer = kLayer;
  l.weights = random_moe_weights(l.config, Fp4Format::nvfp4, seed);
  l.weights.router_weight = test::random_bf16(l.config.num_experts * l.config.hidden, seed + 1, 0.05f).bits;
  save_moe_layer(dir, l);
  return l;
}

// The fp4moe executable beside this test binary (both live in build/*/bin, and
// the pair is carried together to the GPU machine), else the build's path.
std::string cli_path() {
  std::error_code ec;
  const fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / "fp4moe";
  return !ec && fs::exists(beside) ? beside.string() : std::string(FP4MOE_CLI_PATH);
}

int run_cli(const std::string& args) {
  const std::string cli = cli_path();
  if (!fs::exists(cli)) {  // a harness mistake (the CLI was not carried), not a failure of the CLI
    ADD_FAILURE() << "no fp4moe CLI at " << cli << " nor beside this test binary: carry build/release/bin/fp4moe with it";
    return -1;
  }
  const std::string cmd = cli + " run " + args + " > /dev/null 2>&1";
  return WEXITSTATUS(std::system(cmd.c_str()));
}

std::vector<float> bf16_tensor(const io::TensorStore& s, const std::string& name) {
  return io::read_floats(s.get(name));
}

double rel(const std::vector<float>& got, const std::vector<float>& ref) {
  int64_t nans = 0;
  return test::rel_frobenius(got, ref, &nans);
}

TEST(GpuCheckpoint, LoadedLayerMatchesTheReference) {
  FP4MOE_REQUIRE_GPU();
  Scratch s;
  for (const char* name : {"glm5-small", "deepseek-v3-small", "mixtral-small"}) {
    save_sample(name, s / name, 31);
    const MoeCheckpointLayer l = load_moe_layer(s / name, kLayer);
    ASSERT_NE(l.weights.experts[0].gate.weight_scale_2, l.weights.experts[0].up.weight_scale_2)
        << "the sample must give gate and up different scales";
    const int64_t T = 40;
    const test::Bf16Matrix x = test::random_bf16(T * l.config.hidden, 32);
    LayerOptions o;
    o.max_tokens = T;
    MoeLayer layer(l.config, l.weights, o);
    DeviceBuffer<uint16_t> dx(x.bits), dout(size_t(T * l.config.hidden));
    const std::vector<float> logits = router_logits_reference(x.values.data(), T, l.config.hidden, l.weights.router_weight);
    DeviceBuffer<float> dl(logits);
    dout.fill_bytes(0xFF);
    layer.forward(nullptr, reinterpret_cast<const __nv_bfloat16*>(dx.get()), dl.get(), T,
                  reinterpret_cast<__nv_bfloat16*>(dout.get()));
    layer.check_status(nullptr);
    const Routing r = route_reference(l.config, logits.data(), T, l.weights.correction_bias);
    std::vector<int32_t> ids(r.topk_ids.size());
    FP4MOE_CUDA_CHECK(cudaMemcpy(ids.data(), layer.topk_ids(), ids.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(ids, r.topk_ids) << name;
    const std::vector<float> ref = moe_forward_reference(l.config, l.weights, x.values.data(), T, r);
    const std::vector<uint16_t> bits = dout.download();
    std::vector<float> got(bits.size());
    for (size_t i = 0; i < got.size(); ++i) got[i] = bf16_to_float(bits[i]);
    const double err = rel(got, ref);
    EXPECT_LT(err, 1e-2) << name;
    std::printf("  %-20s checkpoint layer on the GPU: rel err %.3e\n", name, err);
  }
}

TEST(GpuReplay, CliReplaysWithAndWithoutRouterLogits) {
  FP4MOE_REQUIRE_GPU();
  Scratch s;
  const MoeCheckpointLayer l = save_sample("glm5-small", s / "ckpt", 41);
  const MoeConfig& c = l.config;
  const int64_t T = 24;
  const test::Bf16Matrix x = test::random_bf16(T * c.hidden, 42);
  const std::vector<float> logits = gaussian_logits(T, c.num_experts, 43);
  io::write_safetensors(s / "with_logits.safetensors",
                        {{"hidden_states", io::Dtype::BF16, {T, c.hidden}, x.bits.data(), x.bits.size() * 2},
                         {"router_logits", io::Dtype::F32, {T, c.num_experts}, logits.data(), logits.size() * 4}});
  io::write_safetensors(s / "hidden_only.safetensors",
                        {{"hidden_states", io::Dtype::BF16, {T, c.hidden}, x.bits.data(), x.bits.size() * 2}});
  const std::string base = "--checkpoint " + (s / "ckpt") + " --layer 3 --check ";

  // Given logits: routing bitwise the reference's, output within 1e-2.
  ASSERT_EQ(run_cli(base + "--input " + (s / "with_logits.safetensors") + " --output " + (s / "a.safetensors")), 0);
  {
    const io::TensorStore out = io::TensorStore::open(s / "a.safetensors");
    const Routing r = route_reference(c, logits.data(), T, l.weights.correction_bias);
    std::vector<int32_t> ids(r.topk_ids.size());
    std::memcpy(ids.data(), out.get("topk_ids").data(), ids.size() * 4);
    EXPECT_EQ(ids, r.topk_ids);
    EXPECT_EQ(0, std::memcmp(out.get("topk_weights").data(), r.topk_weights.data(), r.topk_weights.size() * 4));
    const std::vector<float> ref = moe_forward_reference(c, l.weights, x.values.data(), T, r);
    EXPECT_LT(rel(bf16_tensor(out, "output"), ref), 1e-2);
    EXPECT_LT(io::read_scalar_f32(out.get("error")), 1e-2f);
    EXPECT_EQ(out.get("output").info->dtype, io::Dtype::BF16);
  }
  // No logits: computed on the device from the checkpoint's router weight (cuBLAS), as HF does.
  ASSERT_EQ(run_cli(base + "--input " + (s / "hidden_only.safetensors") + " --output " + (s / "b.safetensors")), 0);
  {
    const io::TensorStore out = io::TensorStore::open(s / "b.safetensors");
    const std::vector<float> ref_logits = router_logits_reference(x.values.data(), T, c.hidden, l.weights.router_weight);
    const Routing r = route_reference(c, ref_logits.data(), T, l.weights.correction_bias);
    std::vector<int32_t> ids(r.topk_ids.size());
    std::memcpy(ids.data(), out.get("topk_ids").data(), ids.size() * 4);
    int64_t differing = 0;
    for (int64_t t = 0; t < T; ++t)
      differing += !std::equal(ids.begin() + t * c.top_k, ids.begin() + (t + 1) * c.top_k, r.topk_ids.begin() + t * c.top_k);
    EXPECT_LE(differing, 1) << "cuBLAS logits may differ from the double reference only at near-ties";
    if (differing == 0) {
      EXPECT_LT(rel(bf16_tensor(out, "output"), moe_forward_reference(c, l.weights, x.values.data(), T, r)), 1e-2);
    }
  }
}

TEST(GpuReplay, Fp32HiddenStatesAndDeterministicOutputs) {
  FP4MOE_REQUIRE_GPU();
  Scratch s;
  const MoeCheckpointLayer l = save_sample("deepseek-v3-small", s / "ckpt", 51);
  const int64_t T = 9;
  std::vector<float> x(size_t(T * l.config.hidden));
  std::mt19937_64 rng(52);
  std::normal_distribution<float> d(0.f, 1.f);
  for (float& v : x) v = d(rng);  // not bf16-exact: logits from the fp32 values on the host, the layer on bf16
  io::write_safetensors(s / "in.safetensors", {{"hidden_states", io::Dtype::F32, {T, l.config.hidden}, x.data(), x.size() * 4}});
  const std::string args = "--checkpoint " + (s / "ckpt") + " --layer 3 --deterministic --check --input " + (s / "in.safetensors");
  ASSERT_EQ(run_cli(args + " --output " + (s / "a.safetensors")), 0);
  ASSERT_EQ(run_cli(args + " --output " + (s / "b.safetensors")), 0);
  const io::TensorStore a = io::TensorStore::open(s / "a.safetensors"), b = io::TensorStore::open(s / "b.safetensors");
  EXPECT_EQ(io::read_bytes(a.get("output")), io::read_bytes(b.get("output"))) << "split finalize is bitwise stable";
  const std::vector<float> logits = router_logits_reference(x.data(), T, l.config.hidden, l.weights.router_weight);
  const Routing r = route_reference(l.config, logits.data(), T, l.weights.correction_bias);
  std::vector<int32_t> ids(r.topk_ids.size());
  std::memcpy(ids.data(), a.get("topk_ids").data(), ids.size() * 4);
  EXPECT_EQ(ids, r.topk_ids);
  EXPECT_LT(io::read_scalar_f32(a.get("error")), 1e-2f);
}

TEST(GpuReplay, BadInputsFailWithoutLeavingAnOutput) {
  FP4MOE_REQUIRE_GPU();
  Scratch s;
  const MoeCheckpointLayer l = save_sample("mixtral-small", s / "ckpt", 61);
  const int64_t T = 4, H = l.config.hidden;
  std::vector<float> x(size_t(T * H), 0.5f);
  x[size_t(2 * H + 3)] = NAN;
  io::write_safetensors(s / "nan.safetensors", {{"hidden_states", io::Dtype::F32, {T, H}, x.data(), x.size() * 4}});
  const std::string base = "--checkpoint " + (s / "ckpt") + " --layer 3 --input ";
  EXPECT_EQ(run_cli(base + (s / "nan.safetensors") + " --output " + (s / "o.safetensors")), 2);
  EXPECT_FALSE(fs::exists(s / "o.safetensors"));
  x[size_t(2 * H + 3)] = 0.f;
  io::write_safetensors(s / "ok.safetensors", {{"hidden_states", io::Dtype::F32, {T, H}, x.data(), x.size() * 4}});
  EXPECT_EQ(run_cli(base + (s / "ok.safetensors") + " --output " + (s / "missing-dir/o.safetensors")), 2);
  EXPECT_EQ(run_cli(base + (s / "ok.safetensors") + " --output " + (s / "o.safetensors")), 0);
  for (const auto& e : fs::directory_iterator(s.dir))
    EXPECT_EQ(e.path().filename().string().find("partial"), std::string::npos) << e.path();
}

}  // namespace
}  // namespace fp4moe
