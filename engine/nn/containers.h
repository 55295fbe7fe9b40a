// nn.ModuleList and nn.ModuleDict: modules held for a model's own forward to call, registered as
// children so that their parameters carry PyTorch's state-dict names ("blocks.0.weight",
// "heads.cls.bias"). Neither has a forward of its own, as in PyTorch.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace tandem::nn {

class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);
  // Registers the module under its index ("0", "1", ...).
  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  // OutOfRange naming the index and the size.
  Module& operator[](size_t i) const;
  std::shared_ptr<Module> ptr(size_t i) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }
  // FailedPrecondition: a ModuleList is not called, its modules are.
  Variable forward(ExecutionContext& ctx, const Variable& x) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

class ModuleDict : public Module {
 public:
  ModuleDict() = default;
  // Keys as PyTorch's: non-empty, without '.', each once; iteration in insertion order.
  void insert(const std::string& key, std::shared_ptr<Module> module);
  bool contains(const std::string& key) const;
  size_t size() const { return named_children().size(); }
  // NotFound naming the key and the keys there are.
  Module& operator[](const std::string& key) const;
  std::shared_ptr<Module> ptr(const std::string& key) const;
  std::vector<std::string> keys() const;
  Variable forward(ExecutionContext& ctx, const Variable& x) override;  // FailedPrecondition, as ModuleList's
};

}  // namespace tandem::nn
