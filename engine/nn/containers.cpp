// ModuleList and ModuleDict (containers.h).
#include "engine/nn/containers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace tandem::nn {

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

std::shared_ptr<Module> ModuleList::ptr(size_t i) const {
  TANDEM_CHECK(i < modules_.size(), ErrorCode::kOutOfRange, "ModuleList: index {} is out of range for {} modules", i,
               modules_.size());
  return modules_[i];
}

Module& ModuleList::operator[](size_t i) const { return *ptr(i); }

Variable ModuleList::forward(ExecutionContext&, const Variable&) {
  throw_error(ErrorCode::kFailedPrecondition,
               "ModuleList has no forward: call its modules from your model's forward (list[i].forward(ctx, x))");
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  register_module(key, std::move(module));  // checks the key: non-empty, no '.', not taken
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, m] : named_children()) {
    if (name == key) return true;
  }
  return false;
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : named_children()) out.push_back(name);
  return out;
}

std::shared_ptr<Module> ModuleDict::ptr(const std::string& key) const {
  for (const auto& [name, m] : named_children()) {
    if (name == key) return m;
  }
  throw_error(ErrorCode::kNotFound, "ModuleDict: no module under key '{}'; its keys are [{}]", key,
               fmt::join(keys(), ", "));
}

Module& ModuleDict::operator[](const std::string& key) const { return *ptr(key); }

Variable ModuleDict::forward(ExecutionContext&, const Variable&) {
  throw_error(ErrorCode::kFailedPrecondition,
               "ModuleDict has no forward: call its modules from your model's forward (dict[\"key\"].forward(ctx, x))");
}

}  // namespace tandem::nn
