#include "dsl/Builders.h"

#include <algorithm>
#include <set>

#include "compiler/Validate.h"

namespace tilejit {

namespace {
BufferDecl decl_of(const dsl::Buffer& b) { return {b.name(), b.elem(), b.dims()}; }
ParamDecl decl_of(const dsl::Param& p) { return {p.name(), p.type()}; }
}  // namespace

AttentionBuilder::AttentionBuilder(std::string name) { p_.name = std::move(name); }
AttentionBuilder& AttentionBuilder::buffer(const dsl::Buffer& b) { return buffer(decl_of(b)); }
AttentionBuilder& AttentionBuilder::buffer(BufferDecl b) {
  p_.buffers.push_back(std::move(b));
  return *this;
}
AttentionBuilder& AttentionBuilder::param(const dsl::Param& p) { return param(decl_of(p)); }
AttentionBuilder& AttentionBuilder::param(ParamDecl p) {
  p_.params.push_back(std::move(p));
  return *this;
}
AttentionBuilder& AttentionBuilder::mask(Expr m) {
  p_.mask = std::move(m);
  return *this;
}
AttentionBuilder& AttentionBuilder::score(Expr s) {
  p_.score = std::move(s);
  return *this;
}
AttentionProgram AttentionBuilder::build() const {
  validate(p_);
  return p_;
}

LossBuilder::LossBuilder(std::string name) { p_.name = std::move(name); }
LossBuilder& LossBuilder::buffer(const dsl::Buffer& b) { return buffer(decl_of(b)); }
LossBuilder& LossBuilder::buffer(BufferDecl b) {
  p_.buffers.push_back(std::move(b));
  return *this;
}
LossBuilder& LossBuilder::param(const dsl::Param& p) { return param(decl_of(p)); }
LossBuilder& LossBuilder::param(ParamDecl p) {
  p_.params.push_back(std::move(p));
  return *this;
}
LossBuilder& LossBuilder::segment(std::string name, int64_t begin, int64_t end, std::string weight,
                                  std::string bias) {
  p_.segments.push_back({std::move(name), begin, end, std::move(weight), std::move(bias)});
  return *this;
}
LossBuilder& LossBuilder::logit(Expr l) {
  p_.logit = std::move(l);
  return *this;
}
LossBuilder& LossBuilder::label_smoothing(double eps) {
  p_.label_smoothing = eps;
  return *this;
}
LossBuilder& LossBuilder::z_loss(double lambda) {
  p_.z_loss = lambda;
  return *this;
}
LossBuilder& LossBuilder::kl(double alpha, double temperature, std::vector<Segment> teacher) {
  p_.kl = KlTerm{alpha, temperature, std::move(teacher)};
  return *this;
}
LossBuilder& LossBuilder::ignore_index(int64_t i) {
  p_.ignore_index = i;
  return *this;
}
LossBuilder& LossBuilder::reduction(Reduction r) {
  p_.reduction = r;
  return *this;
}
LossProgram LossBuilder::build() const {
  validate(p_);
  return p_;
}

}  // namespace tilejit
