#include "compiler/codegen/LlvmCodegen.h"

#include <functional>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "compiler/Lower.h"
#include "compiler/Printer.h"
#include "compiler/codegen/ArgLayout.h"

namespace tilejit {

namespace {

using llvm::Function;
using llvm::IRBuilder;
using llvm::Value;

// Slots of the variables an expression may read.
enum VarSlot { kB, kH, kQ, kKv, kRow, kId, kScore, kLogit, kNumVars };

int var_slot(std::string_view n) {
  static const std::string_view names[] = {var::b,   var::h,  var::q,     var::kv,
                                           var::row, var::id, var::score, var::logit};
  for (int i = 0; i < kNumVars; ++i)
    if (names[i] == n) return i;
  return -1;
}

class Emitter {
 public:
  Emitter(llvm::Module& module, const ArgLayout& layout)
      : m_(module), ctx_(module.getContext()), layout_(layout), b_(ctx_) {
    i1_ = b_.getInt1Ty();
    i8_ = b_.getInt8Ty();
    i16_ = b_.getInt16Ty();
    i32_ = b_.getInt32Ty();
    i64_ = b_.getInt64Ty();
    f32_ = b_.getFloatTy();
    f64_ = b_.getDoubleTy();
  }

  llvm::Error error() { return std::move(error_); }

  // void name(const u8* args, i32 x args..., pointer args...)
  Function* function(std::string_view name, int int_args, std::vector<llvm::Type*> pointers,
                     bool trailing_flag) {
    std::vector<llvm::Type*> params{i8_->getPointerTo()};
    for (int i = 0; i < int_args; ++i) params.push_back(i32_);
    params.insert(params.end(), pointers.begin(), pointers.end());
    if (trailing_flag) params.push_back(i32_);
    auto* type = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    Function* f = Function::Create(type, Function::ExternalLinkage, std::string(name), m_);
    f->addFnAttr(llvm::Attribute::NoUnwind);
    for (size_t i = 0; i < pointers.size(); ++i) {
      f->addParamAttr(static_cast<unsigned>(1 + int_args + i), llvm::Attribute::NoAlias);
      f->addParamAttr(static_cast<unsigned>(1 + int_args + i), llvm::Attribute::NoCapture);
    }
    b_.SetInsertPoint(llvm::BasicBlock::Create(ctx_, "entry", f));
    args_ = f->getArg(0);
    return f;
  }

  IRBuilder<>& builder() { return b_; }
  llvm::Type* f32() { return f32_; }
  llvm::Type* i8() { return i8_; }
  llvm::Type* i32() { return i32_; }

  // for (j = 0; j < n; ++j) body(j); the builder is left after the loop.
  void loop(Value* n, const std::function<void(Value* j)>& body) {
    Function* f = b_.GetInsertBlock()->getParent();
    auto* head = llvm::BasicBlock::Create(ctx_, "loop", f);
    auto* exit = llvm::BasicBlock::Create(ctx_, "done", f);
    llvm::BasicBlock* pre = b_.GetInsertBlock();
    b_.CreateCondBr(b_.CreateICmpSGT(n, b_.getInt32(0)), head, exit);
    b_.SetInsertPoint(head);
    llvm::PHINode* j = b_.CreatePHI(i32_, 2, "j");
    j->addIncoming(b_.getInt32(0), pre);
    body(j);
    Value* next = b_.CreateAdd(j, b_.getInt32(1), "j.next", true, true);
    j->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpSLT(next, n), head, exit);
    b_.SetInsertPoint(exit);
  }

  // Emits `e` with the given variable values (nullptr: unused); each node once.
  Value* expr(const Expr& e, const std::array<Value*, kNumVars>& vars) {
    vars_ = vars;
    memo_.clear();
    ir::visit_post_order(e, [&](const Expr& n) { memo_.emplace(n.get(), node(n)); });
    return memo_.at(e.get());
  }

  Value* typed_pointer(Value* byte_pointer, llvm::Type* element) {
    return b_.CreateBitCast(byte_pointer, element->getPointerTo());
  }
  Value* element_pointer(Value* base, llvm::Type* element, Value* index) {
    return b_.CreateInBoundsGEP(element, base, index);
  }

 private:
  Value* arg_field(size_t offset, llvm::Type* type) {
    Value* p = b_.CreateConstInBoundsGEP1_64(i8_, args_, offset);
    return b_.CreateLoad(type, typed_pointer(p, type));
  }

  void fail(std::string message) {
    if (!error_) error_ = llvm::make_error<llvm::StringError>(message, llvm::inconvertibleErrorCode());
  }

  llvm::Type* type_of(Type t) { return t == Type::Bool ? i1_ : t == Type::I32 ? i32_ : f32_; }

  Value* arg(const Expr& n, size_t i) { return memo_.at(n.arg(i).get()); }

  Value* call_intrinsic(llvm::Intrinsic::ID id, std::vector<llvm::Type*> types,
                        std::vector<Value*> args) {
    return b_.CreateCall(llvm::Intrinsic::getDeclaration(&m_, id, types), args);
  }

  // A transcendental as the interpreter computes it: the C library in double, then rounded.
  Value* libm(const char* name, Value* x) {
    auto callee = m_.getOrInsertFunction(name, llvm::FunctionType::get(f64_, {f64_}, false));
    if (auto* fn = llvm::dyn_cast<Function>(callee.getCallee())) {
      fn->setDoesNotThrow();
      fn->setOnlyReadsMemory();
      fn->setWillReturn();
    }
    return b_.CreateFPTrunc(b_.CreateCall(callee, {b_.CreateFPExt(x, f64_)}), f32_);
  }

  Value* load(const Expr& n) {
    const ArgField* field = layout_.find(n->name);
    if (!field || field->kind != ArgField::Kind::Buffer ||
        field->rank != static_cast<int>(n.num_args())) {
      fail(fmt::format("load of '{}' does not match the program's buffers", n->name));
      return llvm::Constant::getNullValue(type_of(n.type()));
    }
    Value* in_range = b_.getTrue();
    Value* offset = b_.getInt64(0);
    for (int d = 0; d < field->rank; ++d) {
      Value* i = b_.CreateSExt(arg(n, d), i64_);
      Value* size = arg_field(field->offset + buffer_size_offset(d), i64_);
      Value* stride = arg_field(field->offset + buffer_stride_offset(field->rank, d), i64_);
      in_range = b_.CreateAnd(in_range, b_.CreateAnd(b_.CreateICmpSGE(i, b_.getInt64(0)),
                                                     b_.CreateICmpSLT(i, size)));
      offset = b_.CreateAdd(offset, b_.CreateMul(i, stride));
    }
    offset = b_.CreateSelect(in_range, offset, b_.getInt64(0));
    Value* base = arg_field(field->offset, i8_->getPointerTo());
    llvm::Type* storage = field->elem == ElemType::I32   ? i32_
                          : field->elem == ElemType::F32 ? f32_
                                                         : i16_;
    Value* raw = b_.CreateLoad(storage, element_pointer(typed_pointer(base, storage), storage, offset));
    Value* v = raw;
    if (field->elem == ElemType::BF16)
      v = b_.CreateBitCast(b_.CreateShl(b_.CreateZExt(raw, i32_), 16), f32_);
    else if (field->elem == ElemType::F16)
      v = b_.CreateFPExt(b_.CreateBitCast(raw, b_.getHalfTy()), f32_);
    return b_.CreateSelect(in_range, v, llvm::Constant::getNullValue(v->getType()));
  }

  Value* cast(Type to, Type from, Value* a) {
    if (to == from) return a;
    switch (to) {
      case Type::Bool:
        return from == Type::I32 ? b_.CreateICmpNE(a, b_.getInt32(0))
                                 : b_.CreateFCmpUNE(a, llvm::ConstantFP::get(f32_, 0.0));
      case Type::I32:
        if (from == Type::Bool) return b_.CreateZExt(a, i32_);
        return call_intrinsic(llvm::Intrinsic::fptosi_sat, {i32_, f32_}, {a});
      case Type::F32: return from == Type::Bool ? b_.CreateUIToFP(a, f32_) : b_.CreateSIToFP(a, f32_);
    }
    return a;
  }

  Value* int_div(Op op, Value* a, Value* d) {
    Value* zero = b_.getInt32(0);
    Value* is_zero = b_.CreateICmpEQ(d, zero);
    Value* is_minus_one = b_.CreateICmpEQ(d, b_.getInt32(-1));
    Value* safe = b_.CreateSelect(b_.CreateOr(is_zero, is_minus_one), b_.getInt32(1), d);
    if (op == Op::Mod)
      return b_.CreateSelect(b_.CreateOr(is_zero, is_minus_one), zero, b_.CreateSRem(a, safe));
    Value* q = b_.CreateSDiv(a, safe);
    return b_.CreateSelect(is_zero, zero, b_.CreateSelect(is_minus_one, b_.CreateSub(zero, a), q));
  }

  Value* compare(Op op, Type t, Value* a, Value* c) {
    using P = llvm::CmpInst::Predicate;
    P p;
    switch (op) {
      case Op::Eq: p = t == Type::F32 ? P::FCMP_OEQ : P::ICMP_EQ; break;
      case Op::Ne: p = t == Type::F32 ? P::FCMP_UNE : P::ICMP_NE; break;
      case Op::Lt: p = t == Type::F32 ? P::FCMP_OLT : t == Type::I32 ? P::ICMP_SLT : P::ICMP_ULT; break;
      case Op::Le: p = t == Type::F32 ? P::FCMP_OLE : t == Type::I32 ? P::ICMP_SLE : P::ICMP_ULE; break;
      case Op::Gt: p = t == Type::F32 ? P::FCMP_OGT : t == Type::I32 ? P::ICMP_SGT : P::ICMP_UGT; break;
      default: p = t == Type::F32 ? P::FCMP_OGE : t == Type::I32 ? P::ICMP_SGE : P::ICMP_UGE; break;
    }
    return t == Type::F32 ? b_.CreateFCmp(p, a, c) : b_.CreateICmp(p, a, c);
  }

  Value* node(const Expr& n) {
    const Type t = n.type();
    switch (n.op()) {
      case Op::ConstBool: return b_.getInt1(n->ival != 0);
      case Op::ConstInt: return b_.getInt32(static_cast<uint32_t>(n->ival));
      case Op::ConstFloat: return llvm::ConstantFP::get(f32_, static_cast<float>(n->fval));
      case Op::Var: {
        int slot = var_slot(n->name);
        if (slot < 0 || !vars_[slot]) {
          fail(fmt::format("variable '{}' is not available in this hook", n->name));
          return llvm::Constant::getNullValue(type_of(t));
        }
        return vars_[slot];
      }
      case Op::Param: {
        const ArgField* field = layout_.find(n->name);
        if (!field || field->kind == ArgField::Kind::Buffer) {
          fail(fmt::format("param '{}' is not declared", n->name));
          return llvm::Constant::getNullValue(type_of(t));
        }
        return arg_field(field->offset, type_of(t));
      }
      case Op::Load: return load(n);
      case Op::Cast: return cast(t, n.arg(0).type(), arg(n, 0));
      case Op::Not: return b_.CreateNot(arg(n, 0));
      case Op::And: return b_.CreateAnd(arg(n, 0), arg(n, 1));
      case Op::Or: return b_.CreateOr(arg(n, 0), arg(n, 1));
      case Op::Select: return b_.CreateSelect(arg(n, 0), arg(n, 1), arg(n, 2));
      case Op::Neg: return t == Type::I32 ? b_.CreateSub(b_.getInt32(0), arg(n, 0)) : b_.CreateFNeg(arg(n, 0));
      case Op::Abs:
        if (t == Type::I32) {
          Value* a = arg(n, 0);
          return b_.CreateSelect(b_.CreateICmpSLT(a, b_.getInt32(0)), b_.CreateSub(b_.getInt32(0), a), a);
        }
        return call_intrinsic(llvm::Intrinsic::fabs, {f32_}, {arg(n, 0)});
      case Op::Exp: return libm("exp", arg(n, 0));
      case Op::Exp2: return libm("exp2", arg(n, 0));
      case Op::Log: return libm("log", arg(n, 0));
      case Op::Log2: return libm("log2", arg(n, 0));
      case Op::Tanh: return libm("tanh", arg(n, 0));
      case Op::Sqrt: return call_intrinsic(llvm::Intrinsic::sqrt, {f32_}, {arg(n, 0)});
      case Op::Rsqrt: {
        Value* s = call_intrinsic(llvm::Intrinsic::sqrt, {f64_}, {b_.CreateFPExt(arg(n, 0), f64_)});
        return b_.CreateFPTrunc(b_.CreateFDiv(llvm::ConstantFP::get(f64_, 1.0), s), f32_);
      }
      default: break;
    }
    Value* a = arg(n, 0);
    Value* c = arg(n, 1);
    Type at = n.arg(0).type();
    if (is_comparison(n.op())) return compare(n.op(), at, a, c);
    bool f = t == Type::F32;
    switch (n.op()) {
      case Op::Add: return f ? b_.CreateFAdd(a, c) : b_.CreateAdd(a, c);
      case Op::Sub: return f ? b_.CreateFSub(a, c) : b_.CreateSub(a, c);
      case Op::Mul: return f ? b_.CreateFMul(a, c) : b_.CreateMul(a, c);
      case Op::Div: return f ? b_.CreateFDiv(a, c) : int_div(Op::Div, a, c);
      case Op::Mod: return f ? b_.CreateFRem(a, c) : int_div(Op::Mod, a, c);
      // f32 min/max as the C library computes them on x86-64 (minsd/maxsd plus NaN checks):
      // a NaN operand yields the other, and of two equal values (+0, -0) the second.
      case Op::Min:
        return f ? b_.CreateSelect(b_.CreateOr(b_.CreateFCmpOLT(a, c), b_.CreateFCmpUNO(c, c)), a, c)
                 : b_.CreateSelect(b_.CreateICmpSLT(a, c), a, c);
      case Op::Max:
        return f ? b_.CreateSelect(b_.CreateOr(b_.CreateFCmpOGT(a, c), b_.CreateFCmpUNO(c, c)), a, c)
                 : b_.CreateSelect(b_.CreateICmpSGT(a, c), a, c);
      default: break;
    }
    fail(fmt::format("no LLVM lowering for {}", op_name(n.op())));
    return llvm::Constant::getNullValue(type_of(t));
  }

  llvm::Module& m_;
  llvm::LLVMContext& ctx_;
  const ArgLayout& layout_;
  IRBuilder<> b_;
  llvm::Type *i1_, *i8_, *i16_, *i32_, *i64_, *f32_, *f64_;
  Value* args_ = nullptr;
  std::array<Value*, kNumVars> vars_{};
  std::unordered_map<const Node*, Value*> memo_;
  llvm::Error error_ = llvm::Error::success();
};

llvm::Expected<std::unique_ptr<llvm::Module>> finish(std::unique_ptr<llvm::Module> m,
                                                     Emitter& e) {
  if (llvm::Error err = e.error()) return err;
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os))
    return llvm::make_error<llvm::StringError>("generated hook module is invalid: " + os.str(),
                                               llvm::inconvertibleErrorCode());
  return m;
}

}  // namespace

std::string llvm_hook_symbol(std::string_view prefix, std::string_view hook) {
  return fmt::format("{}_{}", prefix, hook);
}

llvm::Expected<std::unique_ptr<llvm::Module>> emit_attention_row_hooks(
    llvm::LLVMContext& context, const LoweredAttention& p, std::string_view prefix) {
  auto m = std::make_unique<llvm::Module>(fmt::format("{}_attention", prefix), context);
  ArgLayout layout = arg_layout(p.program);
  Emitter e(*m, layout);
  IRBuilder<>& b = e.builder();
  llvm::Type* fptr = e.f32()->getPointerTo();
  auto index_vars = [&](Function* f, Value* j) {
    std::array<Value*, kNumVars> v{};
    v[kB] = f->getArg(1);
    v[kH] = f->getArg(2);
    v[kQ] = f->getArg(3);
    v[kKv] = b.CreateAdd(f->getArg(4), j);
    return v;
  };

  {  // score_row: two loops, with and without the mask.
    Function* f = e.function(llvm_hook_symbol(prefix, "score_row"), 5, {fptr}, true);
    Value* n = f->getArg(5);
    Value* s = f->getArg(6);
    auto body = [&](bool masked) {
      return [&, masked](Value* j) {
        Value* at = e.element_pointer(s, e.f32(), j);
        auto v = index_vars(f, j);
        v[kScore] = b.CreateLoad(e.f32(), at);
        Value* out = e.expr(p.program.score, v);
        if (masked) {
          Value* keep = e.expr(p.program.mask, v);
          out = b.CreateSelect(keep, out,
                               llvm::ConstantFP::get(e.f32(), -std::numeric_limits<float>::infinity()));
        }
        b.CreateStore(out, at);
      };
    };
    if (p.mask_is_true) {
      e.loop(n, body(false));
      b.CreateRetVoid();
    } else {
      auto* masked = llvm::BasicBlock::Create(context, "masked", f);
      auto* plain = llvm::BasicBlock::Create(context, "plain", f);
      b.CreateCondBr(b.CreateICmpNE(f->getArg(7), b.getInt32(0)), masked, plain);
      b.SetInsertPoint(masked);
      e.loop(n, body(true));
      b.CreateRetVoid();
      b.SetInsertPoint(plain);
      e.loop(n, body(false));
      b.CreateRetVoid();
    }
  }
  {  // score_grad_row
    Function* f = e.function(llvm_hook_symbol(prefix, "score_grad_row"), 5, {fptr, fptr}, false);
    e.loop(f->getArg(5), [&](Value* j) {
      auto v = index_vars(f, j);
      v[kScore] = b.CreateLoad(e.f32(), e.element_pointer(f->getArg(6), e.f32(), j));
      Value* at = e.element_pointer(f->getArg(7), e.f32(), j);
      Value* masked = b.CreateFCmpOEQ(
          b.CreateLoad(e.f32(), at),
          llvm::ConstantFP::get(e.f32(), -std::numeric_limits<float>::infinity()));
      Value* g = e.expr(p.score_grad, v);
      b.CreateStore(b.CreateSelect(masked, llvm::ConstantFP::get(e.f32(), 0.0), g), at);
    });
    b.CreateRetVoid();
  }
  {  // mask_row
    Function* f = e.function(llvm_hook_symbol(prefix, "mask_row"), 5, {e.i8()->getPointerTo()}, false);
    e.loop(f->getArg(5), [&](Value* j) {
      Value* keep = e.expr(p.program.mask, index_vars(f, j));
      b.CreateStore(b.CreateZExt(keep, e.i8()), e.element_pointer(f->getArg(6), e.i8(), j));
    });
    b.CreateRetVoid();
  }
  return finish(std::move(m), e);
}

llvm::Expected<std::unique_ptr<llvm::Module>> emit_loss_row_hooks(llvm::LLVMContext& context,
                                                                  const LoweredLoss& p,
                                                                  std::string_view prefix) {
  auto m = std::make_unique<llvm::Module>(fmt::format("{}_loss", prefix), context);
  ArgLayout layout = arg_layout(p.program);
  Emitter e(*m, layout);
  IRBuilder<>& b = e.builder();
  llvm::Type* fptr = e.f32()->getPointerTo();
  auto vars = [&](Function* f, Value* j, Value* logit) {
    std::array<Value*, kNumVars> v{};
    v[kRow] = f->getArg(1);
    v[kId] = b.CreateAdd(f->getArg(2), j);
    v[kLogit] = logit;
    return v;
  };
  {
    Function* f = e.function(llvm_hook_symbol(prefix, "logit_row"), 3, {fptr}, false);
    e.loop(f->getArg(3), [&](Value* j) {
      Value* at = e.element_pointer(f->getArg(4), e.f32(), j);
      b.CreateStore(e.expr(p.program.logit, vars(f, j, b.CreateLoad(e.f32(), at))), at);
    });
    b.CreateRetVoid();
  }
  {
    Function* f = e.function(llvm_hook_symbol(prefix, "logit_grad_row"), 3, {fptr, fptr}, false);
    e.loop(f->getArg(3), [&](Value* j) {
      Value* raw = b.CreateLoad(e.f32(), e.element_pointer(f->getArg(4), e.f32(), j));
      b.CreateStore(e.expr(p.logit_grad, vars(f, j, raw)),
                    e.element_pointer(f->getArg(5), e.f32(), j));
    });
    b.CreateRetVoid();
  }
  return finish(std::move(m), e);
}

}  // namespace tilejit
