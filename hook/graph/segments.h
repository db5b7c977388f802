#pragma once
// A job's executable CUDA graphs made launchable in segments (docs/scheduling.md, "Graphs").
//
// A graph launch is one op to the gate: tens of milliseconds of a training step that a returning
// service would wait behind. When a process below the service (FIKIT_PRIORITY above 0, a mode on)
// instantiates a graph, the hook instantiates it as it asked and, beside it, a few smaller graphs:
// a topological order of its nodes cut into consecutive pieces of about FIKIT_GRAPH_SEGMENT_US of
// predicted GPU work each (from the profile of the kernels in them; an unknown kernel, copy or set
// counts a quarter of it, a child graph all of it), each ending where the graph's branches meet when
// that keeps half of it (cut_rule.h). Launched in order on the application's stream,
// each piece after the gate let it go, they do what the whole does: every dependency of a node is
// on a node of its own piece or of an earlier one, which the stream ran first.
//
// The pieces are copies (cuGraphClone, then the nodes outside the piece destroyed), halved
// recursively so that a graph of N nodes costs N log(pieces) node copies once, at instantiation.
// Whatever the program does to the executable graph afterwards reaches the piece holding the node
// too (the cuGraphExec*SetParams calls and enabling nodes: "node changes" below; upload); an update
// (cuGraphExecUpdate) cuts the new graph again; destroying it destroys the pieces.
//
// Launched whole, counted with the reason (Counts): graphs the driver will not clone (memory
// allocation or free nodes, conditional nodes), graphs a device may launch itself, graphs that fit
// one piece, and any piece that could not be made or kept in step with the whole. A programmatic
// dependency (a kernel that may start before its producer ends) between two segments becomes a full
// one: stream order is the stronger rule, and nothing waits on the weaker one but the dependent.
//
// Node changes. An XLA command buffer has every node set again before each launch (a JAX training
// step: about 285 kernel and 72 child-graph nodes), and a node changed in an executable costs the
// host about 1 us (H200), so that changing each copy at once cost a JAX job about 10 % of its speed
// even while it launched whole. While the graph launches whole (nothing above the job), a change is
// made to no copy: the node is marked stale, and while any node is, the graph launches whole even
// where it would go in segments, until the program sets each stale node again (XLA does before
// every launch). While it goes in segments, a change is made to the copy in the segment's own graph
// (about 0.2 us: kernel, copy, set and host nodes) and the segment is marked; before a launch in
// segments each marked one is updated from its graph (cuGraphExecUpdate, about 0.3 us for a few
// kernels). A change of another kind (a child graph, an event, enabling a node) is made to the
// segment's executable at once, and from then on every change to that segment is (an update from
// its graph would undo it).
//
// The launch path only looks the executable up, without locks or allocation; everything else
// happens in the calls that make, change or destroy a graph, where the driver itself allocates.
#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "kernel_predictor.h"

namespace fikit::hook::graph {

struct Segment {
  CUgraphExec exec;
  uint64_t id;             // its op ID: its graph's node kinds and kernel shapes, its place, its own nodes
  uint64_t predicted_ns;   // what the profile predicts of its kernels (unknown ones at a fixed charge)
};

struct Plan;   // segments.cpp


enum class Whole : uint8_t {
  OnePiece,         // fits one segment
  NotCloneable,     // memory allocation, free or conditional nodes: the driver clones none of them
  DeviceLaunch,     // instantiated for device launch
  Failed,           // a driver call failed making or updating the segments
  TableFull,        // more segmented graphs alive than the lookup table holds
  kCount
};
const char* whole_reason(Whole why) noexcept;

struct Counts {
  uint64_t segmented;                         // executables made into segments
  uint64_t segments;                          // segments made
  uint64_t whole[size_t(Whole::kCount)];      // executables left whole, by reason
  uint64_t segment_launches;                  // segments launched
  uint64_t change_ns;                         // host time the copies of node changes took (FIKIT_STATS)
  uint64_t mirrored;                          // copies changed in a segment's graph (node changes)
  uint64_t direct;                            // copies changed in a segment's executable at once
  uint64_t updates;                           // segments updated from their graphs before a launch
  uint64_t skipped_changes;                   // changes made while launching whole (to no copy: stale)
  uint64_t stale_launches;                    // launched whole where segments were wanted, for stale nodes
  uint64_t clean_cuts;                        // of the segments' boundaries, those where the branches met
  uint64_t kernel_nodes;                      // kernel nodes of the graphs cut (each cut counts its own)
  uint64_t kernel_nodes_known;                // of those, the ones the profile knew by shape (weighed as measured)
};
Counts counts() noexcept;

// After the program's instantiation of `graph` as `exec` succeeded: cuts it into segments when this
// process is below a service and `mode` is on. Never fails the program's call.
void instantiated(KernelPredictor* mode, CUgraphExec exec, CUgraph graph, unsigned long long flags) noexcept;
// After a successful cuGraphExecUpdate of `exec` to `graph`: the segments are cut again.
void updated(KernelPredictor* mode, CUgraphExec exec, CUgraph graph) noexcept;
// Before the program destroys `exec`.
void destroying(CUgraphExec exec) noexcept;

// The launch path: the segments of `exec`, or nullptr (launch it whole). Lock-free.
const Plan* find(CUgraphExec exec) noexcept;
uint32_t segment_count(const Plan& plan) noexcept;
const Segment& segment(const Plan& plan, uint32_t i) noexcept;
// Around one launch on `stream`: before the first segment, a launch on another stream than the last
// one waits for the last one (as the driver orders whole launches of one executable); after the
// last, that launch's end is recorded and its segments counted.
// launching() also brings the segments up to date (node changes): false when one could not be,
// after which the executable has no segments (it is launched whole; `plan` is gone).
bool launching(const Plan& plan, CUstream stream) noexcept;
void launched(const Plan& plan, CUstream stream) noexcept;

// How many of one launch's segments may be queued on the GPU at once. Many graph launches queued
// on one stream slow the GPU down: a PyTorch ViT-L training step cut into 512 pieces and launched all
// at once cost 155-208 us of GPU time per boundary on an H100; the same pieces with at most 32
// queued 6.4 us, with 8 queued 1.9 us, with 2 queued 1.6 us (bench/gpu/probes/graph_split_probe.py,
// docs/scheduling.md, "Graphs"). The gate's in-flight bound counts predicted time, not launches,
// and a deep queue makes each piece run longer than predicted, so the bound alone does not cap it.
inline constexpr uint32_t kSegmentsAhead = 8;
// Before segment i of a launch: waits (spinning, then yielding) until segment i - kSegmentsAhead of
// it has run, at most `max_wait_ns` (false: stop waiting for the rest of this launch; a segment can
// depend on work the program has not queued yet, such as a stream-memory wait on a later write).
bool wait_for_room(const Plan& plan, uint32_t i, uint64_t max_wait_ns) noexcept;
// After segment i was queued on `stream`.
void queued(const Plan& plan, uint32_t i, CUstream stream) noexcept;

// The copy that stands for `node` of the executable, for a call that changes the node in the whole
// executable (after the call succeeded there): false when the graph has no such node.
struct NodeCopy {
  CUgraphExec exec;   // the segment's executable
  CUgraphNode node;   // the node in the segment's graph (which names it in the executable too)
  uint32_t segment;
  uint32_t index;     // the node's (set_stale)
};
bool node_copy(const Plan& plan, CUgraphNode node, NodeCopy* out) noexcept;
// The node at `index` (node_copy) was changed in the whole executable only (stale), or in its
// copies too (no longer stale).
void set_stale(const Plan& plan, uint32_t index, bool stale) noexcept;
// Before a launch that would go in segments: true (counted, and said once if it lasts) while a node
// is stale; the graph then launches whole.
bool launches_whole_for_stale_nodes(const Plan& plan) noexcept;
// Whether a change to a node of `segment` goes to the segment's graph (mirror_change), to be applied
// before its next launch; after one that did, deferred().
bool defers(const Plan& plan, uint32_t segment) noexcept;
void deferred(const Plan& plan, uint32_t segment) noexcept;
// Before a change is made to the segment's executable at once: it is brought up to date first and
// takes every later change at once too (CUDA_SUCCESS, or the update's error).
CUresult goes_direct(const Plan& plan, uint32_t segment) noexcept;
// The program's change made to a node of a segment's graph (the kinds with a graph-node setter;
// CUDA_ERROR_NOT_SUPPORTED for the others, which go to the executable).
CUresult mirror_change(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* params) noexcept;
CUresult mirror_change(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* params) noexcept;
CUresult mirror_change(CUgraphNode node, const CUDA_MEMCPY3D* params, CUcontext context) noexcept;
CUresult mirror_change(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* params, CUcontext context) noexcept;
CUresult mirror_change(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* params) noexcept;
CUresult mirror_change(CUgraphNode node, CUgraphNodeParams* params) noexcept;
template <class... Other>
CUresult mirror_change(CUgraphNode, Other...) noexcept {
  return CUDA_ERROR_NOT_SUPPORTED;
}
// FIKIT_STATS: a node change was made to its copy too, taking `ns`.
void add_change_time(uint64_t ns) noexcept;
// The same change could not be made to a copy: the executable is launched whole from now on (its
// whole form has the change; the segment does not).
void segment_out_of_step(CUgraphExec exec, CUresult result) noexcept;

}  // namespace fikit::hook::graph
