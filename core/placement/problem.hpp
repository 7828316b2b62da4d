#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace exo::placement {

/// Raised for a problem that is malformed (a bad file, a bad value, an
/// unknown device name). The message names the offending key path.
class problem_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One device that may hold a contiguous range of layers.
struct device {
  /// Unique name of the device, e.g. "node-a/gpu0".
  std::string id;
  /// Node (machine) the device sits on; links are between nodes.
  std::string node;
  /// Free memory in bytes.
  std::uint64_t memory_bytes = 0;
  /// Sustained FLOP/s for the model's work. Must be > 0 unless
  /// `layer_seconds` is given.
  double flops = 0;
  /// Memory bandwidth in bytes/s; when > 0 a layer takes at least
  /// weight_bytes / memory_bandwidth (the decode roofline). 0 = not modelled.
  double memory_bandwidth = 0;
  /// Measured seconds per token for each layer; overrides `flops` when given.
  std::vector<double> layer_seconds;
  /// Seconds each operation of a layer costs beyond its FLOPs and bytes
  /// (dispatch, waking the device's threads): layer::operations of them
  /// add to a layer's time. 0 = not modelled.
  double launch_seconds = 0;
  /// Thermal headroom in [0, 1] (1 = cold); shown in the device score only.
  double thermal_headroom = 1.0;
  /// Thermal cap: the most FLOPs per token this device may take. 0 = none.
  double max_flops_per_token = 0;
  /// The operator requires this device to be part of the plan.
  bool pinned = false;
  /// The operator excluded this device.
  bool excluded = false;
  /// The device is being drained: no new layers go to it.
  bool drained = false;

  /// True when the device may hold layers.
  bool eligible() const { return !excluded && !drained; }
};

/// Latency (seconds) and bandwidth (bytes/s) of a link.
struct link_spec {
  double latency = 0;
  double bandwidth = 0;
};

/// A link between two nodes (symmetric).
struct link {
  std::string a;
  std::string b;
  link_spec spec;
};

/// One model layer, in pipeline order.
struct layer {
  std::uint64_t weight_bytes = 0;
  std::uint64_t kv_bytes_per_token = 0;
  double flops_per_token = 0;
  /// Bytes of activations this layer passes to the next one per token.
  std::uint64_t activation_bytes = 0;
  /// Device operations per token (see device::launch_seconds).
  double operations = 0;
};

/// Bytes a stage allocates besides its layers' weights and KV caches:
/// working buffers (activations for a batch, attention scratch), and the
/// extras of the stages holding the first and the last layer (logits
/// buffer; an embedding table a runtime keeps on the device). exo's device
/// stages fill these from the model (model_spec.hpp).
struct stage_extras {
  /// On every stage.
  std::uint64_t every_stage = 0;
  /// Also on the stage that holds layer 0.
  std::uint64_t first_stage = 0;
  /// Also on the stage that holds the last layer.
  std::uint64_t last_stage = 0;
};

/// `positions` rounded up to whole blocks of `block_positions` (0: as
/// they are): what a paged KV cache takes for them.
inline std::uint64_t whole_kv_blocks(std::uint64_t positions,
                                     std::uint32_t block_positions) noexcept {
  if (block_positions == 0)
    return positions;
  return (positions + block_positions - 1) / block_positions * block_positions;
}

/// What is being served.
struct request {
  /// Tokens of context the KV cache must hold.
  std::uint64_t context_length = 0;
  /// Sequences in flight at once, each with a KV cache of context_length.
  std::uint64_t sequences = 1;
  /// Fraction of each device's free memory held back, in [0, 1).
  double safety_margin = 0.05;
  /// KV caches held in whole blocks of this many positions (a paged
  /// stage's cache takes its last block whole); 0: position by position.
  std::uint32_t kv_block_positions = 0;

  /// The positions each sequence's KV cache holds at its fullest:
  /// context_length, rounded up to whole blocks.
  std::uint64_t kv_positions() const noexcept {
    return whole_kv_blocks(context_length, kv_block_positions);
  }
};

/// Layers first_layer..last_layer (inclusive) of one device.
struct device_layers {
  std::string device;
  std::size_t first_layer = 0;
  std::size_t last_layer = 0;
};

/// Layers that must run on `device`.
using layer_pin = device_layers;

/// Layers that are on `device` now: their weights need not move if the
/// plan keeps them there.
using resident_layers = device_layers;

/// Operator constraints.
struct constraints {
  /// Most pipeline stages (devices used); 0 = no limit.
  std::size_t max_stages = 0;
  std::vector<layer_pin> pins;
  /// Add `node_penalty` seconds to the objective per node used beyond one.
  bool prefer_fewer_nodes = false;
  double node_penalty = 0.001;
};

/// What to minimise.
enum class objective_kind {
  /// Per-token latency: sum of stage compute and transfers.
  latency,
  /// Throughput: the slowest stage or link (the bottleneck).
  throughput,
  /// blend_weight * latency + (1 - blend_weight) * bottleneck.
  blend,
};

/// Returns "latency", "throughput" or "blend".
const char* to_string(objective_kind k);

/// Parses "latency", "throughput" or "blend"; nullopt otherwise.
std::optional<objective_kind> parse_objective_kind(const std::string& s);

struct objective {
  objective_kind kind = objective_kind::latency;
  /// Weight of latency in a blend, in [0, 1].
  double blend_weight = 0.5;
};

/// A whole placement problem: a cluster snapshot, a model and a request.
struct problem {
  std::string model_name;
  std::vector<device> devices;
  std::vector<link> links;
  /// The link between two devices on one node.
  link_spec intra_node{5e-6, 50e9};
  /// Used for node pairs without an explicit link; without it such pairs
  /// are an error.
  std::optional<link_spec> default_link;
  std::vector<layer> layers;
  /// Working memory of a stage beyond its layers.
  stage_extras stage_memory_extra;
  struct request request;
  struct constraints constraints;
  struct objective objective;
  /// Where weights are now (e.g. the stages of the plan being replaced):
  /// among plans of equal objective the solvers prefer the one that moves
  /// the fewest weight bytes to devices that do not hold them.
  std::vector<resident_layers> resident;

  /// Seconds device `d` needs for layer `l` per token.
  double layer_seconds(std::size_t d, std::size_t l) const;
  /// Bytes layer `l` needs on a device (weights + KV caches for the
  /// context of every sequence).
  std::uint64_t layer_memory(std::size_t l) const;
  /// Bytes a stage of layers [first, end) allocates besides its layers
  /// (stage_memory_extra; end == layers.size() for the last stage).
  std::uint64_t stage_overhead(std::size_t first, std::size_t end) const;
  /// Bytes a stage of layers [first, end) needs on its device: its layers
  /// plus stage_overhead(). What every solver, the plan checker and the
  /// plan's memory figures count.
  std::uint64_t stage_memory(std::size_t first, std::size_t end) const;
  /// Bytes device `d` can give to layers (free memory less the margin).
  std::uint64_t usable_memory(std::size_t d) const;
  /// The link between nodes `a` and `b`; throws problem_error if none.
  /// O(links) a call: for many lookups, link_index.
  link_spec link_between(const std::string& a, const std::string& b) const;
  /// Index of the device named `id`, or nullopt.
  std::optional<std::size_t> find_device(const std::string& id) const;
};

/// The links of a problem by node pair, built once for many lookups
/// (problem::link_between builds one per call: every pair of a 250-node
/// cluster scanning 31 000 links took seconds). Holds `p` by reference.
class link_index {
public:
  explicit link_index(const problem& p);
  /// problem::link_between(a, b), the same answer and error.
  link_spec between(const std::string& a, const std::string& b) const;

private:
  const problem& p_;
  /// "a\0b" with a < b -> the first link listed between them.
  std::unordered_map<std::string, link_spec> by_pair_;
};

/// The most entries of the solvers' transfer table (nodes^2 x (layers + 1))
/// a problem may need: 16 M, 128 MB.
constexpr std::size_t max_transfer_cells = std::size_t{1} << 24;

/// Checks every value and reference of `p`; throws problem_error naming the
/// key path of the first problem found (e.g. "devices[2].memory: must be
/// > 0").
void validate(const problem& p);

/// Builds the layer list from plain per-layer numbers (e.g. from a GGUF
/// header). All vectors must have the same length; throws problem_error.
std::vector<layer>
make_layers(const std::vector<std::uint64_t>& weight_bytes,
            const std::vector<std::uint64_t>& kv_bytes_per_token,
            const std::vector<double>& flops_per_token,
            const std::vector<std::uint64_t>& activation_bytes);

/// `count` copies of `l`.
std::vector<layer> uniform_layers(std::size_t count, const layer& l);

/// Formats bytes for people: "11.2 GiB", "512.0 MiB".
std::string format_bytes(double bytes);

/// Formats seconds for people: "12.35 ms", "840.0 us", "1.250 s".
std::string format_seconds(double seconds);

} // namespace exo::placement
