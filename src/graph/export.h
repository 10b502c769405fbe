// Stage 7 (graph IR): DOT and JSON export of a ComputeGraph for debugging and viz.
// Invariant: exports are pure reads; node ids in the output are build-order ids.
#pragma once

#include <string>

#include "graph/graph.h"

namespace minfer::graph {

// Graphviz: one box per node labelled "id name\nop dtype shape", edges src → consumer;
// inputs, weights, KV regions and outputs get distinct styles.
std::string to_dot(const ComputeGraph& graph);

// {"uid":…, "inputs":[ids], "outputs":[ids], "nodes":[{"id","op","name","dtype",
//  "shape":[ne…], "src":[ids], "backend", "layer", "output", "params":{…}}]}.
// Params list only the fields the op reads.
std::string to_json(const ComputeGraph& graph, int indent = -1);

}  // namespace minfer::graph
