// check_report — checks report files against runtime/report_schema.json.
//
//   check_report --schema=runtime/report_schema.json OUT/ranker/1/report.json [more.json ...]
//
// Supports the part of JSON Schema (draft 07) that the report schema uses: type (one or a list),
// const, enum, required, properties, additionalProperties (false or a schema), items, minimum.
// Prints one line per violation ("file: /path/to/field: what") and exits 0 when every file
// conforms, 1 when one does not, 2 on bad usage or unreadable files.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <gflags/gflags.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

DEFINE_string(schema, "", "the JSON schema (runtime/report_schema.json)");

namespace {

using nlohmann::json;

bool HasType(const json& v, const std::string& type) {
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "boolean") return v.is_boolean();
  if (type == "null") return v.is_null();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  return false;
}

void Check(const json& schema, const json& v, const std::string& path, std::vector<std::string>* errors) {
  if (schema.contains("type")) {
    std::vector<std::string> types;
    if (schema["type"].is_array()) {
      for (const json& t : schema["type"]) types.push_back(t);
    } else {
      types.push_back(schema["type"]);
    }
    bool any = false;
    for (const std::string& t : types) any = any || HasType(v, t);
    if (!any) {
      errors->push_back(absl::StrCat(path, ": expected ", schema["type"].dump(), ", found ", v.dump()));
      return;
    }
  }
  if (schema.contains("const") && v != schema["const"]) {
    errors->push_back(absl::StrCat(path, ": must be ", schema["const"].dump(), ", found ", v.dump()));
  }
  if (schema.contains("enum")) {
    bool found = false;
    for (const json& e : schema["enum"]) found = found || e == v;
    if (!found) errors->push_back(absl::StrCat(path, ": ", v.dump(), " is not one of ", schema["enum"].dump()));
  }
  if (schema.contains("minimum") && v.is_number() && v.get<double>() < schema["minimum"].get<double>()) {
    errors->push_back(absl::StrCat(path, ": ", v.dump(), " is below ", schema["minimum"].dump()));
  }
  if (v.is_object()) {
    for (const json& r : schema.value("required", json::array())) {
      if (!v.contains(r.get<std::string>())) errors->push_back(absl::StrCat(path, ": missing ", r.dump()));
    }
    const json props = schema.value("properties", json::object());
    for (auto it = v.begin(); it != v.end(); ++it) {
      std::string at = absl::StrCat(path, "/", it.key());
      if (props.contains(it.key())) {
        Check(props[it.key()], it.value(), at, errors);
      } else if (schema.contains("additionalProperties")) {
        const json& extra = schema["additionalProperties"];
        if (extra.is_boolean()) {
          if (!extra.get<bool>()) errors->push_back(absl::StrCat(at, ": not in the schema"));
        } else {
          Check(extra, it.value(), at, errors);
        }
      }
    }
  }
  if (v.is_array() && schema.contains("items")) {
    for (size_t i = 0; i < v.size(); ++i) Check(schema["items"], v[i], absl::StrCat(path, "/", i), errors);
  }
}

bool Read(const std::string& path, json* out) {
  std::ifstream in(path);
  if (!in) {
    std::cerr << "check_report: cannot read '" << path << "'\n";
    return false;
  }
  try {
    *out = json::parse(in);
  } catch (const std::exception& e) {
    std::cerr << "check_report: '" << path << "' is not JSON: " << e.what() << "\n";
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("check_report --schema=SCHEMA.json REPORT.json [...]");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_schema.empty() || argc < 2) {
    std::cerr << "check_report: usage: check_report --schema=SCHEMA.json REPORT.json [...]\n";
    return 2;
  }
  json schema;
  if (!Read(FLAGS_schema, &schema)) return 2;
  int rc = 0;
  for (int i = 1; i < argc; ++i) {
    json report;
    if (!Read(argv[i], &report)) return 2;
    std::vector<std::string> errors;
    Check(schema, report, "", &errors);
    for (const std::string& e : errors) std::cout << argv[i] << ": " << (e.empty() ? "/" : e) << "\n";
    if (!errors.empty()) rc = 1;
  }
  return rc;
}
