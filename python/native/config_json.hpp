// MoeConfig and LayerOptions to and from the JSON objects the Python package
// passes (a dict on the Python side). Unknown keys and bad values are errors
// naming the key.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "fp4moe/layer.hpp"
#include "fp4moe/model.hpp"

namespace fp4moe::python {

nlohmann::json config_to_json(const MoeConfig& c);
MoeConfig config_from_json(const std::string& text);
LayerOptions options_from_json(const std::string& text);
Fp4Format format_from_string(const std::string& s);

}  // namespace fp4moe::python
