// Graphs: built node by node or captured from a stream, cloned, edited, instantiated, updated and
// launched. An executable graph is its nodes flattened in a topological order (child graphs
// inlined); a launch submits them in that order on one stream, which is what every dependency
// asks for and more (the simulator runs a context's ops one after the other anyway). Host nodes run
// at submit time, as the simulator's copies and sets move their data then (docs/simulated-gpu.md).
// What CUDA refuses to clone (memory allocation and free nodes) is refused here too.
#include <algorithm>
#include <cstring>
#include <memory>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "driver_state.h"

using namespace fikit::simgpu;
using namespace fikit::simgpu::driver;

namespace {

std::unordered_set<const GraphNode*> g_live_nodes;   // under g_mutex

GraphNode* node_of(CUgraphNode handle) {
  auto* node = reinterpret_cast<GraphNode*>(handle);
  return g_live_nodes.count(node) != 0 ? node : nullptr;
}

CUgraphNode handle_of(GraphNode* node) { return reinterpret_cast<CUgraphNode>(node); }

void destroy_graph_locked(Graph* g);

void free_node(GraphNode* node) {
  g_live_nodes.erase(node);
  if (node->child != nullptr) destroy_graph_locked(node->child);
  node->magic = 0;
  delete node;
}

void destroy_graph_locked(Graph* g) {
  for (GraphNode* n : g->nodes) free_node(n);
  g->nodes.clear();
  g_graphs.release(g);
}

// Under g_mutex. Adds `node` to `g` after `deps` (nodes of `g`).
CUresult add_node(Graph* g, std::unique_ptr<GraphNode> node, const CUgraphNode* deps, size_t count,
                  CUgraphNode* out) {
  if (count != 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < count; ++i) {
    GraphNode* dep = node_of(deps[i]);
    if (dep == nullptr || dep->owner != g) return CUDA_ERROR_INVALID_VALUE;
    if (std::find(node->deps.begin(), node->deps.end(), dep) != node->deps.end()) return CUDA_ERROR_INVALID_VALUE;
    node->deps.push_back(dep);
  }
  node->owner = g;
  GraphNode* raw = node.release();
  g->nodes.push_back(raw);
  g_live_nodes.insert(raw);
  if (out != nullptr) *out = handle_of(raw);
  return CUDA_SUCCESS;
}

std::unique_ptr<GraphNode> make_node(CUgraphNodeType type) {
  auto node = std::make_unique<GraphNode>();
  node->type = type;
  return node;
}

// Copies a kernel's parameters as CUDA does at node creation, and the pointers to them.
CUresult set_kernel(GraphNode& node, CUfunction func, const unsigned grid[3], const unsigned block[3],
                    unsigned shared_mem, void** params, void** extra) {
  Function* f = g_functions.find(func);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0 || block[0] == 0 || block[1] == 0 || block[2] == 0 ||
      uint64_t(block[0]) * block[1] * block[2] > 1024)
    return CUDA_ERROR_INVALID_VALUE;
  if (!f->param_sizes.empty() && params == nullptr && extra == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t threads = uint64_t(grid[0]) * grid[1] * grid[2] * block[0] * block[1] * block[2];
  GraphOp op{OpKind::Kernel, kernel_duration_ns(*f, params, extra), uint32_t(std::min<uint64_t>(threads, UINT32_MAX)),
             nullptr, nullptr, 0, 0, 0, block[0] * block[1] * block[2]};
  op.func = f;
  std::copy(grid, grid + 3, op.grid);
  std::copy(block, block + 3, op.block);
  op.shared_mem = shared_mem;
  node.op = op;
  node.kernel_params.clear();
  if (params != nullptr) {
    for (size_t i = 0; i < f->param_sizes.size(); ++i) {
      const auto* p = static_cast<const uint8_t*>(params[i]);
      node.kernel_params.insert(node.kernel_params.end(), p, p + f->param_sizes[i]);
    }
  }
  return CUDA_SUCCESS;
}

CUresult set_memset(GraphNode& node, const CUDA_MEMSET_NODE_PARAMS* p) {
  if (p == nullptr || (p->elementSize != 1 && p->elementSize != 4)) return CUDA_ERROR_INVALID_VALUE;
  const size_t bytes = size_t(p->width) * p->elementSize * std::max<size_t>(p->height, 1);
  if (!is_device_range(p->dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
  node.op = GraphOp{OpKind::Set, set_duration_ns(bytes), 0, reinterpret_cast<void*>(p->dst), nullptr, bytes,
                    p->value, uint8_t(p->elementSize)};
  return CUDA_SUCCESS;
}

// Linear copies only (a width of bytes, rows and slices packed): what the tests build.
CUresult set_memcpy(GraphNode& node, const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t bytes = p->WidthInBytes * std::max<size_t>(p->Height, 1) * std::max<size_t>(p->Depth, 1);
  const auto end = [bytes](CUmemorytype type, const void* host, CUdeviceptr dev, bool* ok) -> const void* {
    if (type == CU_MEMORYTYPE_HOST) {
      *ok = host != nullptr;
      return host;
    }
    *ok = (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) && is_device_range(dev, bytes);
    return reinterpret_cast<const void*>(dev);
  };
  bool src_ok = false, dst_ok = false;
  const void* src = end(p->srcMemoryType, p->srcHost, p->srcDevice, &src_ok);
  const void* dst = end(p->dstMemoryType, p->dstHost, p->dstDevice, &dst_ok);
  if (!src_ok || !dst_ok || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  node.op = GraphOp{OpKind::Copy, copy_duration_ns(bytes), 0, const_cast<void*>(dst), src, bytes, 0, 0};
  return CUDA_SUCCESS;
}

Graph* new_graph() {
  Graph* g = g_graphs.allocate();
  return g;
}

// Under g_mutex. A copy of `src` (child graphs copied too), or nullptr: out of graphs, or a node
// type CUDA does not clone.
Graph* clone_locked(const Graph* src, CUresult* err) {
  for (const GraphNode* n : src->nodes) {
    if (n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC || n->type == CU_GRAPH_NODE_TYPE_MEM_FREE ||
        n->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
      *err = CUDA_ERROR_NOT_SUPPORTED;
      return nullptr;
    }
  }
  Graph* g = new_graph();
  if (g == nullptr) {
    *err = CUDA_ERROR_OUT_OF_MEMORY;
    return nullptr;
  }
  g->cloned_from = src;
  std::unordered_map<const GraphNode*, GraphNode*> copies;
  for (const GraphNode* n : src->nodes) {
    auto copy = std::make_unique<GraphNode>(*n);
    copy->deps.clear();
    for (const GraphNode* d : n->deps) copy->deps.push_back(copies.at(d));
    copy->cloned_from = n;
    copy->child = nullptr;
    if (n->child != nullptr) {
      copy->child = clone_locked(n->child, err);
      if (copy->child == nullptr) {
        destroy_graph_locked(g);
        return nullptr;
      }
    }
    copy->owner = g;
    GraphNode* raw = copy.release();
    copies[n] = raw;
    g->nodes.push_back(raw);
    g_live_nodes.insert(raw);
  }
  return g;
}

// The nodes of `g` in a topological order, ties broken by creation order.
std::vector<const GraphNode*> topological(const Graph& g) {
  std::unordered_map<const GraphNode*, size_t> index;
  for (size_t i = 0; i < g.nodes.size(); ++i) index[g.nodes[i]] = i;
  std::vector<size_t> waiting(g.nodes.size(), 0);
  std::vector<std::vector<size_t>> after(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    waiting[i] = g.nodes[i]->deps.size();
    for (const GraphNode* d : g.nodes[i]->deps) after[index.at(d)].push_back(i);
  }
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (waiting[i] == 0) ready.push(i);
  std::vector<const GraphNode*> order;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    order.push_back(g.nodes[i]);
    for (size_t j : after[i])
      if (--waiting[j] == 0) ready.push(j);
  }
  return order;   // shorter than the graph: a cycle (cannot be built through this API)
}

void flatten(const Graph& g, const GraphNode* key, std::vector<ExecItem>* out) {
  for (const GraphNode* n : topological(g)) {
    if (n->type == CU_GRAPH_NODE_TYPE_GRAPH) {
      flatten(*n->child, key != nullptr ? key : n, out);
      continue;
    }
    out->push_back(ExecItem{key != nullptr ? key : n, n, n->type, n->op, n->host_fn, n->host_data, n->event, true});
  }
}

// A graph's topology: node types and dependencies by creation index (what cuGraphExecUpdate asks
// to be unchanged).
std::vector<uint64_t> shape_of(const Graph& g) {
  std::unordered_map<const GraphNode*, uint64_t> index;
  std::vector<uint64_t> shape;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    index[g.nodes[i]] = i;
    shape.push_back(uint64_t(g.nodes[i]->type) << 32 | g.nodes[i]->deps.size());
    for (const GraphNode* d : g.nodes[i]->deps) shape.push_back(index.at(d));
  }
  return shape;
}

CUresult instantiate(CUgraphExec* out, CUgraph graph, unsigned long long flags) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.find(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  GraphExec* exec = g_graph_execs.allocate();
  if (exec == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  flatten(*g, nullptr, &exec->items);
  exec->shape = shape_of(*g);
  exec->flags = flags;
  *out = reinterpret_cast<CUgraphExec>(exec);
  return CUDA_SUCCESS;
}

// Under g_mutex: the executable's item made from top-level node `node`, or nullptr.
ExecItem* item_of(GraphExec* exec, CUgraphNode handle) {
  GraphNode* node = node_of(handle);
  if (node == nullptr) return nullptr;
  for (ExecItem& item : exec->items)
    if (item.key == node && item.node == node) return &item;
  return nullptr;
}

template <class Edit>
CUresult edit_item(CUgraphExec handle, CUgraphNode node, CUgraphNodeType type, Edit edit) {
  GraphExec* exec = g_graph_execs.find(handle);
  if (exec == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  ExecItem* item = item_of(exec, node);
  if (item == nullptr || item->type != type) return CUDA_ERROR_INVALID_VALUE;
  return edit(*item);
}

CUresult get_edges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data, size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.find(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  size_t n = 0;
  for (GraphNode* node : g->nodes) {
    for (GraphNode* dep : node->deps) {
      if (from != nullptr && n < *count) {
        from[n] = handle_of(dep);
        if (to != nullptr) to[n] = handle_of(node);
        if (data != nullptr) std::memset(&data[n], 0, sizeof data[n]);
      }
      ++n;
    }
  }
  if (from == nullptr) *count = n;
  else if (n < *count) *count = n;
  return CUDA_SUCCESS;
}

template <class Params>
CUresult kernel_params(CUgraphNode handle, Params* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr || node->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  std::memset(out, 0, sizeof *out);
  out->func = reinterpret_cast<CUfunction>(node->op.func);
  out->gridDimX = node->op.grid[0], out->gridDimY = node->op.grid[1], out->gridDimZ = node->op.grid[2];
  out->blockDimX = node->op.block[0], out->blockDimY = node->op.block[1], out->blockDimZ = node->op.block[2];
  out->sharedMemBytes = node->op.shared_mem;
  return CUDA_SUCCESS;   // (kernelParams: not handed back, as a captured kernel's are not)
}

template <class Params>
CUresult add_kernel(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, const Params* p) {
  if (out == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.find(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto node = make_node(CU_GRAPH_NODE_TYPE_KERNEL);
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult r = set_kernel(*node, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard guard(g_mutex);
  return add_node(g, std::move(node), deps, count, out);
}

template <class Params>
CUresult exec_kernel_set(CUgraphExec exec, CUgraphNode node, const Params* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNode scratch;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult r = set_kernel(scratch, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r != CUDA_SUCCESS) return r;
  return edit_item(exec, node, CU_GRAPH_NODE_TYPE_KERNEL, [&](ExecItem& item) {
    item.op = scratch.op;
    return CUDA_SUCCESS;
  });
}

CUresult exec_update(CUgraphExec handle, CUgraph graph, CUgraphExecUpdateResult* result) {
  *result = CU_GRAPH_EXEC_UPDATE_ERROR;
  GraphExec* exec = g_graph_execs.find(handle);
  Graph* g = g_graphs.find(graph);
  if (exec == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  if (shape_of(*g) != exec->shape) {
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  std::vector<ExecItem> items;
  flatten(*g, nullptr, &items);
  exec->items = std::move(items);
  *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

// A set or copy node: made from its parameters by `set` (set_memset, set_memcpy), then added.
template <class Params>
CUresult add_op_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count, CUgraphNodeType type,
                     CUresult (*set)(GraphNode&, const Params*), const Params* params) {
  Graph* g = g_graphs.find(graph);
  if (out == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto node = make_node(type);
  CUresult r = set(*node, params);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard guard(g_mutex);
  return add_node(g, std::move(node), deps, count, out);
}

// The same node's op in an executable, from new parameters.
template <class Params>
CUresult set_exec_op(CUgraphExec exec, CUgraphNode node, CUgraphNodeType type,
                     CUresult (*set)(GraphNode&, const Params*), const Params* params) {
  GraphNode scratch;
  CUresult r = set(scratch, params);
  if (r != CUDA_SUCCESS) return r;
  return edit_item(exec, node, type, [&](ExecItem& item) {
    item.op = scratch.op;
    return CUDA_SUCCESS;
  });
}

}  // namespace

namespace fikit::simgpu::driver {

GraphNode* append_captured(Graph* g, const GraphOp& op) {
  auto node = make_node(op.kind == OpKind::Kernel ? CU_GRAPH_NODE_TYPE_KERNEL
                        : op.kind == OpKind::Copy ? CU_GRAPH_NODE_TYPE_MEMCPY
                                                  : CU_GRAPH_NODE_TYPE_MEMSET);
  node->op = op;
  if (g->capture_tail != nullptr) node->deps.push_back(g->capture_tail);
  node->owner = g;
  GraphNode* raw = node.release();
  g->nodes.push_back(raw);
  g_live_nodes.insert(raw);
  g->capture_tail = raw;
  return raw;
}

}  // namespace fikit::simgpu::driver

extern "C" {

// ---- building ----

CUresult cuGraphCreate(CUgraph* out, unsigned int flags) {
  if (out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  Graph* g = new_graph();
  if (g == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph handle) {
  Graph* g = g_graphs.find(handle);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  destroy_graph_locked(g);
  return CUDA_SUCCESS;
}

CUresult cuGraphAddKernelNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                              const CUDA_KERNEL_NODE_PARAMS_v1* params) {
  return add_kernel(out, graph, deps, count, params);
}
CUresult cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                 const CUDA_KERNEL_NODE_PARAMS* params) {
  return add_kernel(out, graph, deps, count, params);
}

CUresult cuGraphAddMemsetNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                              const CUDA_MEMSET_NODE_PARAMS* params, CUcontext) {
  return add_op_node(out, graph, deps, count, CU_GRAPH_NODE_TYPE_MEMSET, set_memset, params);
}

CUresult cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                              const CUDA_MEMCPY3D* params, CUcontext) {
  return add_op_node(out, graph, deps, count, CU_GRAPH_NODE_TYPE_MEMCPY, set_memcpy, params);
}

CUresult cuGraphAddEmptyNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count) {
  Graph* g = g_graphs.find(graph);
  if (out == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  return add_node(g, make_node(CU_GRAPH_NODE_TYPE_EMPTY), deps, count, out);
}

CUresult cuGraphAddHostNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                            const CUDA_HOST_NODE_PARAMS* params) {
  Graph* g = g_graphs.find(graph);
  if (out == nullptr || g == nullptr || params == nullptr || params->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto node = make_node(CU_GRAPH_NODE_TYPE_HOST);
  node->host_fn = params->fn;
  node->host_data = params->userData;
  std::lock_guard guard(g_mutex);
  return add_node(g, std::move(node), deps, count, out);
}

static CUresult add_event_node(CUgraphNodeType type, CUgraphNode* out, CUgraph graph, const CUgraphNode* deps,
                               size_t count, CUevent event) {
  Graph* g = g_graphs.find(graph);
  if (out == nullptr || g == nullptr || event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto node = make_node(type);
  node->event = event;
  std::lock_guard guard(g_mutex);
  return add_node(g, std::move(node), deps, count, out);
}
CUresult cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                   CUevent event) {
  return add_event_node(CU_GRAPH_NODE_TYPE_EVENT_RECORD, out, graph, deps, count, event);
}
CUresult cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                 CUevent event) {
  return add_event_node(CU_GRAPH_NODE_TYPE_WAIT_EVENT, out, graph, deps, count, event);
}

CUresult cuGraphAddChildGraphNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                  CUgraph child) {
  Graph* g = g_graphs.find(graph);
  Graph* c = g_graphs.find(child);
  if (out == nullptr || g == nullptr || c == nullptr || g == c) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  CUresult err = CUDA_SUCCESS;
  Graph* copy = clone_locked(c, &err);
  if (copy == nullptr) return err;
  auto node = make_node(CU_GRAPH_NODE_TYPE_GRAPH);
  node->child = copy;
  CUresult r = add_node(g, std::move(node), deps, count, out);
  if (r != CUDA_SUCCESS) destroy_graph_locked(copy);
  return r;
}

// Allocation nodes allocate when added (the address is fixed for the graph's life, as in CUDA) and
// do nothing when launched; a free node does nothing either. They are here for what they forbid:
// a graph with them cannot be cloned.
CUresult cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                                CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  Graph* g = g_graphs.find(graph);
  if (out == nullptr || g == nullptr || params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr ptr = 0;
  CUresult r = cuMemAlloc_v2(&ptr, params->bytesize);
  if (r != CUDA_SUCCESS) return r;
  auto node = make_node(CU_GRAPH_NODE_TYPE_MEM_ALLOC);
  node->alloc = ptr;
  params->dptr = ptr;
  std::lock_guard guard(g_mutex);
  return add_node(g, std::move(node), deps, count, out);
}
CUresult cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t count,
                               CUdeviceptr ptr) {
  Graph* g = g_graphs.find(graph);
  if (out == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto node = make_node(CU_GRAPH_NODE_TYPE_MEM_FREE);
  node->alloc = ptr;
  std::lock_guard guard(g_mutex);
  return add_node(g, std::move(node), deps, count, out);
}

// ---- reading and editing ----

CUresult cuGraphGetNodes(CUgraph graph, CUgraphNode* nodes, size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = g_graphs.find(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  if (nodes == nullptr) {
    *count = g->nodes.size();
    return CUDA_SUCCESS;
  }
  const size_t n = std::min(*count, g->nodes.size());
  for (size_t i = 0; i < n; ++i) nodes[i] = handle_of(g->nodes[i]);
  *count = n;
  return CUDA_SUCCESS;
}

CUresult cuGraphGetEdges(CUgraph graph, CUgraphNode* from, CUgraphNode* to, size_t* count) {
  return get_edges(graph, from, to, nullptr, count);
}
CUresult cuGraphGetEdges_v2(CUgraph graph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data, size_t* count) {
  return get_edges(graph, from, to, data, count);
}

CUresult cuGraphNodeGetType(CUgraphNode handle, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}

CUresult cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* params) {
  return kernel_params(node, params);
}
CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* params) {
  return kernel_params(node, params);
}

CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode handle, CUgraph* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr || node->type != CU_GRAPH_NODE_TYPE_GRAPH) return CUDA_ERROR_INVALID_VALUE;
  *out = reinterpret_cast<CUgraph>(node->child);
  return CUDA_SUCCESS;
}

CUresult cuGraphClone(CUgraph* out, CUgraph original) {
  Graph* g = g_graphs.find(original);
  if (out == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  CUresult err = CUDA_SUCCESS;
  Graph* copy = clone_locked(g, &err);
  if (copy == nullptr) return err;
  *out = reinterpret_cast<CUgraph>(copy);
  return CUDA_SUCCESS;
}

CUresult cuGraphNodeFindInClone(CUgraphNode* out, CUgraphNode original, CUgraph clone) {
  Graph* g = g_graphs.find(clone);
  if (out == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  const GraphNode* node = node_of(original);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (GraphNode* n : g->nodes) {
    if (n->cloned_from == node) {
      *out = handle_of(n);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGraphDestroyNode(CUgraphNode handle) {
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Graph* g = node->owner;
  for (GraphNode* n : g->nodes) n->deps.erase(std::remove(n->deps.begin(), n->deps.end(), node), n->deps.end());
  g->nodes.erase(std::remove(g->nodes.begin(), g->nodes.end(), node), g->nodes.end());
  if (g->capture_tail == node) g->capture_tail = nullptr;
  free_node(node);
  return CUDA_SUCCESS;
}

// ---- executable graphs ----

CUresult cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph graph, unsigned long long flags) {
  return instantiate(out, graph, flags);
}
CUresult cuGraphInstantiate(CUgraphExec* out, CUgraph graph, CUgraphNode*, char*, size_t) {
  return instantiate(out, graph, 0);
}
CUresult cuGraphInstantiate_v2(CUgraphExec* out, CUgraph graph, CUgraphNode*, char*, size_t) {
  return instantiate(out, graph, 0);
}
CUresult cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const CUresult r = instantiate(out, graph, params->flags);
  params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  params->hErrNode_out = nullptr;
  return r;
}
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(out, graph, params);
}

CUresult cuGraphExecGetFlags(CUgraphExec handle, cuuint64_t* flags) {
  GraphExec* exec = g_graph_execs.find(handle);
  if (exec == nullptr || flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = exec->flags;
  return CUDA_SUCCESS;
}

// A launch submits the items in order; a host node's function runs when its turn comes.
CUresult cuGraphLaunch(CUgraphExec handle, CUstream stream) {
  if (!g_device) return CUDA_ERROR_NOT_INITIALIZED;
  GraphExec* exec = g_graph_execs.find(handle);
  if (exec == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (const ExecItem& item : exec->items) {
    if (!item.enabled) continue;
    CUresult r = CUDA_SUCCESS;
    switch (item.type) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
      case CU_GRAPH_NODE_TYPE_MEMSET:
      case CU_GRAPH_NODE_TYPE_MEMCPY: r = submit(stream, item.op); break;
      case CU_GRAPH_NODE_TYPE_HOST: item.host_fn(item.host_data); break;
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD: r = cuEventRecord(item.event, stream); break;
      default: break;   // waits (one FIFO per context), empty, allocation and free nodes
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch_ptsz(CUgraphExec handle, CUstream stream) { return cuGraphLaunch(handle, stream); }

CUresult cuGraphUpload(CUgraphExec handle, CUstream) {
  return g_graph_execs.find(handle) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}
CUresult cuGraphUpload_ptsz(CUgraphExec handle, CUstream stream) { return cuGraphUpload(handle, stream); }

CUresult cuGraphExecDestroy(CUgraphExec handle) {
  GraphExec* exec = g_graph_execs.find(handle);
  if (exec == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard guard(g_mutex);
  exec->items.clear();
  g_graph_execs.release(exec);
  return CUDA_SUCCESS;
}

CUresult cuGraphExecUpdate(CUgraphExec exec, CUgraph graph, CUgraphNode* error_node, CUgraphExecUpdateResult* result) {
  CUgraphExecUpdateResult r;
  const CUresult err = exec_update(exec, graph, &r);
  if (error_node != nullptr) *error_node = nullptr;
  if (result != nullptr) *result = r;
  return err;
}
CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, CUgraphExecUpdateResultInfo* info) {
  CUgraphExecUpdateResult r;
  const CUresult err = exec_update(exec, graph, &r);
  if (info != nullptr) {
    info->result = r;
    info->errorNode = nullptr;
    info->errorFromNode = nullptr;
  }
  return err;
}

CUresult cuGraphExecKernelNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return exec_kernel_set(exec, node, p);
}
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  return exec_kernel_set(exec, node, p);
}

CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p,
                                        CUcontext) {
  return set_exec_op(exec, node, CU_GRAPH_NODE_TYPE_MEMSET, set_memset, p);
}

CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p, CUcontext) {
  return set_exec_op(exec, node, CU_GRAPH_NODE_TYPE_MEMCPY, set_memcpy, p);
}

CUresult cuGraphExecHostNodeSetParams(CUgraphExec exec, CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return edit_item(exec, node, CU_GRAPH_NODE_TYPE_HOST, [&](ExecItem& item) {
    item.host_fn = p->fn;
    item.host_data = p->userData;
    return CUDA_SUCCESS;
  });
}

CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  return edit_item(exec, node, CU_GRAPH_NODE_TYPE_EVENT_RECORD, [&](ExecItem& item) {
    item.event = event;
    return CUDA_SUCCESS;
  });
}
CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec exec, CUgraphNode node, CUevent event) {
  return edit_item(exec, node, CU_GRAPH_NODE_TYPE_WAIT_EVENT, [&](ExecItem& item) {
    item.event = event;
    return CUDA_SUCCESS;
  });
}

// The child's items are replaced by the new child graph's (same topology, as CUDA asks).
CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec handle, CUgraphNode handle_node, CUgraph child) {
  GraphExec* exec = g_graph_execs.find(handle);
  Graph* c = g_graphs.find(child);
  if (exec == nullptr || c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle_node);
  if (node == nullptr || node->type != CU_GRAPH_NODE_TYPE_GRAPH || shape_of(*node->child) != shape_of(*c))
    return CUDA_ERROR_INVALID_VALUE;
  std::vector<ExecItem> fresh;
  flatten(*c, node, &fresh);
  auto first = std::find_if(exec->items.begin(), exec->items.end(), [&](const ExecItem& i) { return i.key == node; });
  if (first == exec->items.end()) return CUDA_ERROR_INVALID_VALUE;
  auto last = std::find_if(first, exec->items.end(), [&](const ExecItem& i) { return i.key != node; });
  // Items keep pointing at the child graph's nodes the executable was made from: a later call finds
  // them by their key, not by these.
  for (size_t i = 0; i < fresh.size() && first + ptrdiff_t(i) < last; ++i) {
    fresh[i].node = (first + ptrdiff_t(i))->node;
  }
  const ptrdiff_t at = first - exec->items.begin();
  exec->items.erase(first, last);
  exec->items.insert(exec->items.begin() + at, fresh.begin(), fresh.end());
  return CUDA_SUCCESS;
}

// A graph's own node changed (not an executable's): what later instantiations and updates take.
extern "C++" {
template <class Params>
static CUresult graph_kernel_set(CUgraphNode handle, const Params* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphNode scratch;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ}, block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  CUresult r = set_kernel(scratch, p->func, grid, block, p->sharedMemBytes, p->kernelParams, p->extra);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr || node->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  node->op = scratch.op;
  node->kernel_params = std::move(scratch.kernel_params);
  return CUDA_SUCCESS;
}
}  // extern "C++"
CUresult cuGraphKernelNodeSetParams(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return graph_kernel_set(node, p);
}
CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  return graph_kernel_set(node, p);
}

extern "C++" template <class Params>
CUresult graph_op_set(CUgraphNode handle, CUgraphNodeType type, CUresult (*set)(GraphNode&, const Params*),
                             const Params* params) {
  GraphNode scratch;
  CUresult r = set(scratch, params);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  node->op = scratch.op;
  return CUDA_SUCCESS;
}
CUresult cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  return graph_op_set(node, CU_GRAPH_NODE_TYPE_MEMSET, set_memset, p);
}
CUresult cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* p) {
  return graph_op_set(node, CU_GRAPH_NODE_TYPE_MEMCPY, set_memcpy, p);
}
CUresult cuGraphHostNodeSetParams(CUgraphNode handle, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  GraphNode* node = node_of(handle);
  if (node == nullptr || node->type != CU_GRAPH_NODE_TYPE_HOST) return CUDA_ERROR_INVALID_VALUE;
  node->host_fn = p->fn;
  node->host_data = p->userData;
  return CUDA_SUCCESS;
}
// The generic form, for the node kinds the simulator sets (the others: not supported).
CUresult cuGraphNodeSetParams(CUgraphNode node, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return graph_kernel_set(node, &p->kernel);
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS m{p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                      p->memset.width, p->memset.height};
      return cuGraphMemsetNodeSetParams(node, &m);
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY: return cuGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS h{p->host.fn, p->host.userData};
      return cuGraphHostNodeSetParams(node, &h);
    }
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult cuGraphNodeSetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int enabled) {
  GraphExec* e = g_graph_execs.find(exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  bool found = false;
  GraphNode* n = node_of(node);
  for (ExecItem& item : e->items) {
    if (n != nullptr && item.key == n) {
      item.enabled = enabled != 0;
      found = true;
    }
  }
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult cuGraphNodeGetEnabled(CUgraphExec exec, CUgraphNode node, unsigned int* enabled) {
  GraphExec* e = g_graph_execs.find(exec);
  if (e == nullptr || enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard guard(g_mutex);
  GraphNode* n = node_of(node);
  for (const ExecItem& item : e->items) {
    if (n != nullptr && item.key == n) {
      *enabled = item.enabled ? 1 : 0;
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;
}

}  // extern "C"
