// Impl "c"'s host call as an XLA FFI handler: what native._Sim.run does, in C.
//
// XLA hands the handler its operands and results in place (no copies), and the
// work that _Sim.run does in NumPy (the dirty check of the state, the rounding of
// the state and the derived fields to the data's float type) runs here. Every
// data field is an operand or a result of its own: packing them into one array
// would cost XLA a slice and a copy per field and step, more than the step of a
// small model.
//
// Operands: state (n, nstate, 2) u32, the bits of each world's float64
// mjSTATE_INTEGRATION row; shared (1, P) and per_world (n, Q) float, model fields;
// then the state fields as the data holds them, (n, size) float each, in the
// order of the state row.
// Results: bits (n, nstate, 2) u32; flags (n, 2) s32: contacts, and whether
// MuJoCo reset the world because it diverged; then the state fields of the new
// row rounded to the data's float type, in the same order; then the derived
// fields named by `outputs`, (n, size) float each.
//
// The rules are those of native.py: a state value that differs from the float
// rounding of the exact one was written by someone and is taken; a model field
// equal to the rounding of the host model's value keeps the exact value, another
// is written into the batch's per-simulation copy (mjb_expand), and a field once
// expanded is written at every later call.
//
// Each world runs through mjb_apply on the batch's threads: the batch loads the
// world's state row (and its model, with its expanded fields) into a thread's
// mjData, the function below runs mj_step (nstep times), mj_forward or
// mj_fwdPosition, which is what mjb_step, mjb_forward(mjSTAGE_ACC) and
// mjb_forward(mjSTAGE_POS) run, and writes the world's new state row (exact and
// rounded) and derived fields straight into XLA's results, on the same thread.
// The batch does not save the row (every call writes all rows before it runs),
// and bound outputs (mjb_output) would copy every derived field once more,
// single-file.
//
// A second handler (MjxrPlacedHostCall) takes the same operands followed by
// buffers that XLA aliases to its results after the flags (a shell's packed state,
// donated), and writes the bits, state fields and derived fields into them at the
// offsets `places` names, leaving the rest as it came: packing separate results
// would cost a copy of every one. It also reads in place: `views` puts each state
// field at an offset of one of the operands before those buffers (the shell's
// packed state as it came in), and `shared_offset` the shared model fields at an
// offset of `shared` (the packed model), so that XLA copies no slice of them
// into operands of their own. That matters more than the copy: a step of XLA:CPU
// whose program has more than 8 thunks runs them on a dataflow executor that
// hands thunks to other threads when about 8 or more are ready at once (and may
// hand a custom call to another thread when anything else is ready beside it);
// each hand-off costs tens of microseconds on a 2-core machine.
//
// One mjBatch per (host, n), made at first use; a host is registered by Python
// (mjxr_register) and released when its Python object goes (mjxr_release).

#include <mujoco/mjbatch.h>
#include <mujoco/mjxmacro.h>
#include <mujoco/mujoco.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>
#define MJXR_HAVE_MXCSR 1
#endif

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

#define MJXR_EXPORT __attribute__((visibility("default")))

extern "C" MJXR_EXPORT XLA_FFI_Error* MjxrHostCall(XLA_FFI_CallFrame* call_frame);
extern "C" MJXR_EXPORT XLA_FFI_Error* MjxrPlacedHostCall(XLA_FFI_CallFrame* call_frame);

namespace {

constexpr int kDivergence[] = {mjWARN_BADQACC, mjWARN_BADQPOS, mjWARN_BADQVEL};

// The exact values of a host model field, as float64 (MuJoCo keeps a few model
// fields as float; their values widen exactly). False if there is no such field.
template <typename T>
void Widen(const T* p, long n, std::vector<double>* out) {
  out->assign(n, 0.0);
  for (long i = 0; i < n; ++i) (*out)[i] = static_cast<double>(p[i]);
}

bool ModelField(const mjModel* m, std::string_view path, std::vector<double>* out) {
  if (path.substr(0, 4) == "opt.") {
    std::string_view name = path.substr(4);
#define X(type, nm, n)                   \
  if (name == #nm) {                     \
    Widen<type>(&m->opt.nm, (n), out);   \
    return true;                         \
  }
#define XVEC(type, nm, n)                \
  if (name == #nm) {                     \
    Widen<type>(m->opt.nm, (n), out);    \
    return true;                         \
  }
    MJOPTION_FIELDS
#undef X
#undef XVEC
    return false;
  }
  MJMODEL_POINTERS_PREAMBLE(m)
#define X(type, nm, nr, nc)                                             \
  if (path == #nm) {                                                    \
    Widen<type>(m->nm, static_cast<long>(m->nr) * (nc), out);           \
    return true;                                                        \
  }
#define XNV X
  MJMODEL_POINTERS
#undef X
#undef XNV
  return false;
}

// "name:size,name:size" as pairs.
bool ParseList(std::string_view text, std::vector<std::pair<std::string, long>>* out) {
  out->clear();
  while (!text.empty()) {
    size_t end = text.find(',');
    std::string_view item = text.substr(0, end);
    size_t colon = item.rfind(':');
    if (colon == std::string_view::npos) return false;
    long size = 0;
    for (char c : item.substr(colon + 1)) {
      if (c < '0' || c > '9') return false;
      size = size * 10 + (c - '0');
    }
    out->emplace_back(std::string(item.substr(0, colon)), size);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return true;
}

// An mjData array of mjtNum, as a member pointer: the same field of every mjData.
struct DataField {
  mjtNum* mjData::*member;
  long size;
};

template <typename T>
bool Member(T* mjData::*, long, DataField*) {
  return false;  // not an array of mjtNum
}

bool Member(mjtNum* mjData::*member, long size, DataField* out) {
  *out = DataField{member, size};
  return true;
}

bool DataMember(const mjModel* m, std::string_view name, DataField* out) {
#define X(type, nm, nr, nc) \
  if (name == #nm) return Member(&mjData::nm, static_cast<long>(m->nr) * (nc), out);
#define XNV X
  MJDATA_POINTERS
#undef XNV
#undef X
  return false;
}

// The state row (mjSTATE_INTEGRATION) read straight from mjData's fields, one
// copy per component: mj_getState looks every component up by its bit, which on a
// small model costs as much as the copies (~0.1 us a world). Each component is an
// mjtNum array of mjData, or time, or eq_active (mjtByte).
class RowReader {
 public:
  // The components of m's row, checked against mj_getState once; an unknown or
  // mismatched layout (another MuJoCo) leaves the reader on mj_getState.
  explicit RowReader(const mjModel* m) : nstate_(mj_stateSize(m, mjSTATE_INTEGRATION)) {
    long total = 0;
    for (int k = 0; k < mjNSTATE; ++k) {
      int bit = 1 << k;
      if (!(mjSTATE_INTEGRATION & bit)) continue;
      long size = mj_stateSize(m, bit);
      if (!size) continue;
      Part part{bit, size, nullptr};
      switch (bit) {
        case mjSTATE_TIME: break;
        case mjSTATE_EQ_ACTIVE: break;
        case mjSTATE_QPOS: part.member = &mjData::qpos; break;
        case mjSTATE_QVEL: part.member = &mjData::qvel; break;
        case mjSTATE_ACT: part.member = &mjData::act; break;
        case mjSTATE_HISTORY: part.member = &mjData::history; break;
        case mjSTATE_WARMSTART: part.member = &mjData::qacc_warmstart; break;
        case mjSTATE_CTRL: part.member = &mjData::ctrl; break;
        case mjSTATE_QFRC_APPLIED: part.member = &mjData::qfrc_applied; break;
        case mjSTATE_XFRC_APPLIED: part.member = &mjData::xfrc_applied; break;
        case mjSTATE_MOCAP_POS: part.member = &mjData::mocap_pos; break;
        case mjSTATE_MOCAP_QUAT: part.member = &mjData::mocap_quat; break;
        case mjSTATE_USERDATA: part.member = &mjData::userdata; break;
        case mjSTATE_PLUGIN: part.member = &mjData::plugin_state; break;
        case mjSTATE_PLASTIC: part.member = &mjData::plastic; break;
        default: return;  // a component this file does not know
      }
      parts_.push_back(part);
      total += size;
    }
    if (total != nstate_ || !Agrees(m)) parts_.clear();
    fast_ = total == nstate_ && !parts_.empty();
  }

  // Writes d's row into row (nstate values).
  void Read(const mjModel* m, const mjData* d, mjtNum* row) const {
    if (!fast_) {
      mj_getState(m, d, row, mjSTATE_INTEGRATION);
      return;
    }
    for (const Part& p : parts_) {
      if (p.bit == mjSTATE_TIME) {
        row[0] = d->time;
      } else if (p.bit == mjSTATE_EQ_ACTIVE) {
        for (long j = 0; j < p.size; ++j) row[j] = d->eq_active[j];
      } else {
        std::memcpy(row, d->*p.member, sizeof(mjtNum) * p.size);
      }
      row += p.size;
    }
  }

 private:
  struct Part {
    int bit;
    long size;
    mjtNum* mjData::*member;  // null for time and eq_active
  };

  // Whether Read gives mj_getState's row, on a state of distinct values.
  bool Agrees(const mjModel* m) {
    fast_ = true;
    mjData* d = mj_makeData(m);
    std::vector<mjtNum> row(nstate_), ours(nstate_);
    for (long j = 0; j < nstate_; ++j) row[j] = 0.5 + j;
    mj_setState(m, d, row.data(), mjSTATE_INTEGRATION);
    for (int j = 0; j < m->neq; ++j) d->eq_active[j] = j % 2;
    mj_getState(m, d, row.data(), mjSTATE_INTEGRATION);
    Read(m, d, ours.data());
    mj_deleteData(d);
    return std::memcmp(row.data(), ours.data(), sizeof(mjtNum) * nstate_) == 0;
  }

  long nstate_;
  bool fast_ = false;
  std::vector<Part> parts_;
};

struct Param {
  std::string path;
  long size;
  long offset;
  const std::vector<double>* exact;
  bool setconst;  // mj_setConst reads it: a world given new values is set up again
};

enum How { kStep, kForward, kPosition };

// A call's static description, resolved against one batch.
struct Plan {
  How how;
  std::vector<DataField> outputs;
  std::vector<Param> shared, per_world;
  long nshared, nper_world;
};

// MuJoCo resets a diverging world and counts the warning (BADQACC, BADQPOS,
// BADQVEL); the reset clears the counts first, so a world that diverged before
// ends at the same count, 1. A nonzero count is therefore set to kSentinel for
// the call (a zero one stays: MuJoCo prints a warning the first time), any other
// count after the call is a divergence, and the count MuJoCo would hold is put
// back.
constexpr int kSentinel = 1 << 30;

struct Divergence {
  int before[3];

  void Start(mjWarningStat* w) {
    for (int k = 0; k < 3; ++k) {
      int& number = w[kDivergence[k]].number;
      before[k] = number;
      if (number) number = kSentinel;
    }
  }

  int Finish(mjWarningStat* w) const {
    int diverged = 0;
    for (int k = 0; k < 3; ++k) {
      int& number = w[kDivergence[k]].number;
      if (number != (before[k] ? kSentinel : 0)) diverged = 1;
      if (before[k] && number >= kSentinel) number = before[k] + (number - kSentinel);
    }
    return diverged;
  }
};

template <typename T>
struct CallArgs {
  const Plan* plan;
  int nstep;
  const RowReader* reader;
  long nstate;
  const long* sizes;      // values per world of each state field, in row order
  size_t nfields;
  T* const* rounded;      // one (n, sizes[k]) result per state field
  uint32_t* bits;         // (n, nstate, 2): the new rows, exact
  mjWarningStat* warning; // (n, mjNWARNING): the batch's counters
  T* const* outputs;      // one (n, size) result per plan output
  int32_t* flags;
};

// One world's call, on one of the batch's threads.
template <typename T>
void RunOne(const mjModel* m, mjData* d, int sim, void* arg) {
  const CallArgs<T>& a = *static_cast<const CallArgs<T>*>(arg);
  const Plan& plan = *a.plan;
  Divergence divergence;
  divergence.Start(d->warning);
  if (plan.how == kStep) {
    for (int i = 0; i < a.nstep; ++i) mj_step(m, d);
  } else if (plan.how == kForward) {
    mj_forward(m, d);
  } else {
    mj_fwdPosition(m, d);
  }
  a.flags[2 * sim] = d->ncon;
  a.flags[2 * sim + 1] = divergence.Finish(d->warning);
  // The batch is not asked to save the world (that would read the row a second
  // time, single-file after the call): its new row goes straight into XLA's
  // results, exact and rounded, and its warning counters back to the batch.
  thread_local std::vector<mjtNum> row;
  row.resize(a.nstate);
  a.reader->Read(m, d, row.data());
  std::memcpy(a.bits + 2 * sim * a.nstate, row.data(), sizeof(mjtNum) * a.nstate);
  std::memcpy(a.warning + static_cast<long>(sim) * mjNWARNING, d->warning, sizeof(d->warning));
  const mjtNum* value = row.data();
  for (size_t k = 0; k < a.nfields; ++k) {
    T* out = a.rounded[k] + sim * a.sizes[k];
    for (long j = 0; j < a.sizes[k]; ++j) out[j] = static_cast<T>(value[j]);
    value += a.sizes[k];
  }
  for (size_t k = 0; k < plan.outputs.size(); ++k) {
    const DataField& f = plan.outputs[k];
    const mjtNum* src = d->*f.member;
    T* out = a.outputs[k] + sim * f.size;
    for (long j = 0; j < f.size; ++j) out[j] = static_cast<T>(src[j]);
  }
}

struct Sim {
  std::mutex mu;
  mjBatch* batch = nullptr;
  int n = 0, nstate = 0;
  const mjModel* host = nullptr;
  std::unique_ptr<RowReader> reader;
  std::map<std::string, std::vector<double>> base;  // host model values by path
  std::set<std::string> expanded;
  std::map<std::string, std::vector<double>> last;  // setconst inputs as last written
  std::vector<char> moved;                           // (n,) worlds to set up again
  std::vector<int> ids;
  std::vector<int> same;  // (n,) the world a world repeats, or -1 (Repeats)
  std::unordered_map<std::string, std::unique_ptr<Plan>> plans;

  ~Sim() {
    if (batch) mjb_deleteBatch(batch);
  }

  bool Params(std::string_view text, const std::set<std::string>& setconst,
              std::vector<Param>* params, long* total, std::string* error) {
    std::vector<std::pair<std::string, long>> items;
    if (!ParseList(text, &items)) {
      *error = "impl 'c': a malformed list of model fields";
      return false;
    }
    *total = 0;
    for (auto& [path, size] : items) {
      auto it = base.find(path);
      if (it == base.end()) {
        std::vector<double> exact;
        if (!ModelField(host, path, &exact)) {
          *error = "impl 'c': the host model has no float field " + path;
          return false;
        }
        it = base.emplace(path, std::move(exact)).first;
      }
      if (static_cast<long>(it->second.size()) != size) {
        *error = "impl 'c': model field " + path + " has " + std::to_string(it->second.size()) +
                 " values in the host model, " + std::to_string(size) + " in the call";
        return false;
      }
      params->push_back(Param{path, size, *total, &it->second, setconst.count(path) > 0});
      *total += size;
    }
    return true;
  }

  const Plan* Resolve(std::string_view how, std::string_view outs, std::string_view shared,
                      std::string_view per_world, std::string_view setconst_fields,
                      std::string* error) {
    std::string key;
    key.append(how).append("|").append(outs).append("|").append(shared).append("|");
    key.append(per_world).append("|").append(setconst_fields);
    auto it = plans.find(key);
    if (it != plans.end()) return it->second.get();
    auto plan = std::make_unique<Plan>();
    if (how == "step") {
      plan->how = kStep;
    } else if (how == "forward") {
      plan->how = kForward;
    } else if (how == "position") {
      plan->how = kPosition;
    } else {
      *error = "impl 'c': unknown call " + std::string(how);
      return nullptr;
    }
    std::vector<std::pair<std::string, long>> items;
    if (!ParseList(outs, &items)) {
      *error = "impl 'c': a malformed list of outputs";
      return nullptr;
    }
    for (auto& [name, size] : items) {
      DataField field;
      if (!DataMember(host, name, &field)) {
        *error = "impl 'c': " + name + " is not an mjData array of mjtNum";
        return nullptr;
      }
      if (field.size != size) {
        *error = "impl 'c': output " + name + " has " + std::to_string(field.size) +
                 " values per world in MuJoCo, " + std::to_string(size) + " in the call";
        return nullptr;
      }
      plan->outputs.push_back(field);
    }
    std::set<std::string> setconst;
    std::string listed(setconst_fields);
    for (size_t start = 0; start < listed.size();) {
      size_t end = listed.find(',', start);
      if (end == std::string::npos) end = listed.size();
      if (end > start) setconst.insert(listed.substr(start, end - start));
      start = end + 1;
    }
    if (!Params(shared, setconst, &plan->shared, &plan->nshared, error)) return nullptr;
    if (!Params(per_world, setconst, &plan->per_world, &plan->nper_world, error)) {
      return nullptr;
    }
    return plans.emplace(std::move(key), std::move(plan)).first->second.get();
  }

  // Writes model fields (rows of `stride` values: one row for all worlds, or n)
  // where they differ from the host model's rounded values.
  template <typename T>
  bool WriteParams(const std::vector<Param>& params, const T* values, long stride, int rows,
                   std::string* error) {
    for (const Param& p : params) {
      const double* exact = p.exact->data();
      bool keep = expanded.count(p.path) == 0;
      for (int r = 0; keep && r < rows; ++r) {
        const T* v = values + r * stride + p.offset;
        for (long j = 0; j < p.size; ++j) {
          if (!(v[j] == static_cast<T>(exact[j]))) {
            keep = false;
            break;
          }
        }
      }
      if (keep) continue;
      int size = 0, elemsize = 0;
      void* dst = mjb_expand(batch, p.path.c_str(), &size, &elemsize);
      if (!dst || size != p.size || (elemsize != 8 && elemsize != 4)) {
        *error = "impl 'c': MuJoCo's batch cannot take per-world values of " + p.path;
        return false;
      }
      expanded.insert(p.path);
      double* last_values = nullptr;
      if (p.setconst) {
        auto it = last.find(p.path);
        if (it == last.end()) {  // as the host model has it, in every world
          it = last.emplace(p.path, std::vector<double>(static_cast<size_t>(n) * p.size)).first;
          for (int i = 0; i < n; ++i) {
            std::memcpy(it->second.data() + static_cast<long>(i) * p.size, exact,
                        sizeof(double) * p.size);
          }
        }
        last_values = it->second.data();
      }
      for (int i = 0; i < n; ++i) {
        const T* v = values + (rows == 1 ? 0 : i) * stride + p.offset;
        for (long j = 0; j < p.size; ++j) {
          double w = v[j] == static_cast<T>(exact[j]) ? exact[j] : static_cast<double>(v[j]);
          if (last_values) {
            double& was = last_values[static_cast<long>(i) * p.size + j];
            if (w != was) moved[i] = 1;  // NaN != NaN: moved, as in NumPy
            was = w;
          }
          if (elemsize == 8) {
            static_cast<double*>(dst)[i * p.size + j] = w;
          } else {
            static_cast<float*>(dst)[i * p.size + j] = static_cast<float>(w);
          }
        }
      }
    }
    return true;
  }

  ffi::Error Failed(int nfail, const char* what) {
    const int* status = mjb_status(batch);
    int first = 0;
    while (first < n && !status[first]) ++first;
    return ffi::Error::Internal(
        std::string("impl 'c': MuJoCo raised in ") + what + " of " + std::to_string(nfail) +
        " of " + std::to_string(n) + " simulations; simulation " + std::to_string(first) +
        ": " + (first < n ? mjb_error(batch, first) : ""));
  }

  // The state fields: `seen` and `rounded` hold one (n, sizes[k]) array per field
  // of the row, in its order; `outputs` one (n, size) array per plan output.
  template <typename T>
  ffi::Error Run(const Plan& plan, int nstep, const uint32_t* state,
                 const std::vector<const T*>& seen, const std::vector<long>& sizes,
                 const T* shared, const T* per_world, uint32_t* bits,
                 const std::vector<T*>& rounded, const std::vector<T*>& outputs,
                 int32_t* flags) {
    mjtNum* rows = mjb_state(batch);
    // A state value that is not the rounding of the exact one was written: take it.
    for (int i = 0; i < n; ++i) {
      const long row = static_cast<long>(i) * nstate;
      long col = 0;
      for (size_t k = 0; k < seen.size(); ++k) {
        const T* s = seen[k] + i * sizes[k];
        for (long j = 0; j < sizes[k]; ++j, ++col) {
          double exact;
          std::memcpy(&exact, state + 2 * (row + col), sizeof(double));
          rows[row + col] = s[j] == static_cast<T>(exact) ? exact : static_cast<double>(s[j]);
        }
      }
    }
    std::string error;
    moved.assign(n, 0);
    if (!WriteParams(plan.shared, shared, plan.nshared, 1, &error) ||
        !WriteParams(plan.per_world, per_world, plan.nper_world, n, &error)) {
      return ffi::Error::Internal(error);
    }
    ids.clear();
    for (int i = 0; i < n; ++i) {
      if (moved[i]) ids.push_back(i);
    }
    if (!ids.empty()) {
      int nfail = mjb_setConst(batch, ids.data(), static_cast<int>(ids.size()));
      if (nfail) return Failed(nfail, "mj_setConst");
    }
    CallArgs<T> args{&plan,       nstep,          reader.get(),       nstate,
                     sizes.data(), rounded.size(), rounded.data(),     bits,
                     mjb_warning(batch), outputs.data(), flags};
    // A forward pass computes a world that repeats the one before it once: a
    // restart's padding slots all read the same world, and a reset without
    // randomization starts every world alike. A step's worlds seldom repeat.
    const bool repeats = plan.how != kStep && Repeats(plan, per_world);
    // The batch's rows are not saved: every call writes them all first (above).
    int nfail = mjb_apply(batch, repeats ? ids.data() : nullptr,
                          repeats ? static_cast<int>(ids.size()) : n, RunOne<T>, &args,
                          /*save=*/0);
    if (nfail) return Failed(nfail, "the step");
    if (repeats) Copy(plan, sizes, bits, rounded, outputs, flags);
    return ffi::Error::Success();
  }

  // Whether some world repeats the one before it (same state row, model values
  // and warning counters); if so, `same` names the world each repeats (-1: none)
  // and `ids` the worlds to compute.
  template <typename T>
  bool Repeats(const Plan& plan, const T* per_world) {
    const mjtNum* rows = mjb_state(batch);
    const mjWarningStat* warning = mjb_warning(batch);
    const long q = plan.nper_world;
    same.assign(n, -1);
    ids.clear();
    for (long i = 0; i < n; ++i) {
      const bool repeat =
          i > 0 &&
          !std::memcmp(rows + i * nstate, rows + (i - 1) * nstate, sizeof(mjtNum) * nstate) &&
          !std::memcmp(per_world + i * q, per_world + (i - 1) * q, sizeof(T) * q) &&
          !std::memcmp(warning + i * mjNWARNING, warning + (i - 1) * mjNWARNING,
                       sizeof(mjWarningStat) * mjNWARNING);
      if (repeat) {
        same[i] = same[i - 1] >= 0 ? same[i - 1] : static_cast<int>(i - 1);
      } else {
        ids.push_back(static_cast<int>(i));
      }
    }
    return static_cast<int>(ids.size()) < n;
  }

  // Each repeating world's results, copied from the world it repeats.
  template <typename T>
  void Copy(const Plan& plan, const std::vector<long>& sizes, uint32_t* bits,
            const std::vector<T*>& rounded, const std::vector<T*>& outputs, int32_t* flags) {
    mjWarningStat* warning = mjb_warning(batch);
    for (long i = 0; i < n; ++i) {
      const long j = same[i];
      if (j < 0) continue;
      std::memcpy(bits + 2 * i * nstate, bits + 2 * j * nstate, sizeof(uint32_t) * 2 * nstate);
      for (size_t k = 0; k < rounded.size(); ++k) {
        std::memcpy(rounded[k] + i * sizes[k], rounded[k] + j * sizes[k], sizeof(T) * sizes[k]);
      }
      for (size_t k = 0; k < outputs.size(); ++k) {
        const long size = plan.outputs[k].size;
        std::memcpy(outputs[k] + i * size, outputs[k] + j * size, sizeof(T) * size);
      }
      flags[2 * i] = flags[2 * j];
      flags[2 * i + 1] = flags[2 * j + 1];
      std::memcpy(warning + i * mjNWARNING, warning + j * mjNWARNING,
                  sizeof(mjWarningStat) * mjNWARNING);
    }
  }
};

struct Host {
  const mjModel* model;
  int nthread;
  std::mutex mu;  // guards sims and released
  bool released = false;
  std::map<int, std::unique_ptr<Sim>> sims;
};

std::mutex registry_mu;
std::map<int64_t, std::shared_ptr<Host>> registry;

std::shared_ptr<Host> Find(int64_t token) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = registry.find(token);
  return it == registry.end() ? nullptr : it->second;
}

Sim* SimOf(Host& host, int n, std::string* error) {
  std::lock_guard<std::mutex> lock(host.mu);
  if (host.released) {
    *error = "impl 'c': the host of this call was released";
    return nullptr;
  }
  auto it = host.sims.find(n);
  if (it != host.sims.end()) return it->second.get();
  mjBatchConfig config;
  mjb_defaultConfig(&config);
  config.nthread = host.nthread;
  config.persistent = 0;
  char err[1000] = "";
  mjBatch* b = mjb_makeBatch(host.model, n, &config, err, sizeof(err));
  if (!b) {
    *error = std::string("impl 'c': could not make a batch of ") + std::to_string(n) +
             " simulations: " + err;
    return nullptr;
  }
  auto sim = std::make_unique<Sim>();
  sim->batch = b;
  sim->n = n;
  sim->nstate = mjb_nstate(b);
  sim->host = host.model;
  sim->reader = std::make_unique<RowReader>(host.model);
  return host.sims.emplace(n, std::move(sim)).first->second.get();
}

// MuJoCo's results must not depend on the thread the call runs on: denormals are
// neither flushed nor read as zero during the call (the batch's threads, made at
// its first call, inherit the same setting).
class NativeFloats {
 public:
  NativeFloats() {
#ifdef MJXR_HAVE_MXCSR
    saved_ = _mm_getcsr();
    _mm_setcsr(saved_ & ~(0x8000u | 0x0040u));
#endif
  }
  ~NativeFloats() {
#ifdef MJXR_HAVE_MXCSR
    _mm_setcsr(saved_);
#endif
  }

 private:
  unsigned saved_ = 0;
};

// Where a call's results go: separate results (one per field), or places in
// buffers XLA hands over (a packed state, donated), named by `places`.
struct Results {
  uint32_t* bits;
  std::vector<void*> fields;   // one (n, sizes[k]) array per state field
  std::vector<void*> outputs;  // one (n, size) array per plan output
};

// `places`: "buffer:offset" (in elements of the buffer's type) for the bits, then
// each state field, then each output; each lies whole, (n, size) row-major, at its
// offset. False (with `error`) where one does not fit its buffer or type.
bool Place(std::string_view places, ffi::RemainingRets& dests, const std::vector<long>& sizes,
           const Plan& plan, int n, long nstate, ffi::DataType dtype, Results* out,
           std::string* error) {
  std::vector<std::pair<std::string, long>> items;
  if (!ParseList(places, &items) || items.size() != 1 + sizes.size() + plan.outputs.size()) {
    *error = "impl 'c': a malformed list of places";
    return false;
  }
  for (size_t k = 0; k < items.size(); ++k) {
    const bool bits = k == 0;
    const long count = bits ? 2 * n * nstate
                            : n * (k <= sizes.size() ? sizes[k - 1]
                                                     : plan.outputs[k - 1 - sizes.size()].size);
    char* end = nullptr;
    const unsigned long b = std::strtoul(items[k].first.c_str(), &end, 10);
    if (items[k].first.empty() || *end != 0 || b >= dests.size()) {
      *error = "impl 'c': place " + std::to_string(k) + " names no buffer";
      return false;
    }
    auto dest = dests.get<ffi::AnyBuffer>(b);
    const long offset = items[k].second;
    if (!dest.has_value() ||
        (count && ((*dest)->element_type() != (bits ? ffi::DataType::U32 : dtype) ||
                   offset < 0 || offset + count > static_cast<long>((*dest)->element_count())))) {
      *error = "impl 'c': place " + std::to_string(k) + " does not fit its buffer";
      return false;
    }
    char* base = static_cast<char*>((*dest)->untyped_data()) +
                 offset * ffi::ByteWidth((*dest)->element_type());
    if (bits) {
      out->bits = reinterpret_cast<uint32_t*>(base);
    } else if (k <= sizes.size()) {
      out->fields.push_back(base);
    } else {
      out->outputs.push_back(base);
    }
  }
  return true;
}

struct View {
  long operand, offset, size;  // size -1: the operand's values per world
};

// "operand:offset:size,..." as views (ParseList, then each name as "operand:offset");
// false where an item is not three numbers.
bool ParseViews(std::string_view text, std::vector<View>* out) {
  std::vector<std::pair<std::string, long>> items;
  if (!ParseList(text, &items)) return false;
  for (auto& [where, size] : items) {
    std::vector<std::pair<std::string, long>> at;
    if (!ParseList(where, &at) || at.size() != 1 || at[0].first.empty() ||
        at[0].first.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    out->push_back(View{std::atol(at[0].first.c_str()), at[0].second, size});
  }
  return true;
}

// The state fields as the data holds them, checked against the state row; their
// sizes go to `sizes`. Without `views`, operands `fields[0:nfields]`, one per field,
// (n, size) each. With `views` ("operand:offset:size" per field, in elements), each
// field lies whole, (n, size) row-major, at that offset of operand
// `fields[operand]` (of `nfields` operands): a shell passes the packed buffer a
// field lies in instead of a slice of it, so that XLA runs no copy for it.
bool Seen(ffi::RemainingArgs& fields, size_t nfields, std::string_view views, int n,
          long nstate, ffi::DataType dtype, std::vector<const void*>* seen,
          std::vector<long>* sizes, std::string* error) {
  std::vector<View> items;
  if (views.empty()) {
    for (size_t k = 0; k < nfields; ++k) items.push_back(View{static_cast<long>(k), 0, -1});
  } else if (!ParseViews(views, &items)) {
    *error = "impl 'c': a malformed list of views";
    return false;
  }
  long total = 0;
  for (auto [operand, offset, size] : items) {
    if (static_cast<size_t>(operand) >= nfields) {
      *error = "impl 'c': a view of no operand";
      return false;
    }
    auto arg = fields.get<ffi::AnyBuffer>(operand);
    if (!arg.has_value() || arg->element_type() != dtype) {
      *error = "impl 'c': state fields of other types";
      return false;
    }
    const long count = static_cast<long>(arg->element_count());
    if (size < 0) {  // a field of its own: its size is its values per world
      if (count % n != 0) {
        *error = "impl 'c': state fields of other sizes";
        return false;
      }
      size = count / n;
    }
    if (offset + n * size > count) {
      *error = "impl 'c': a view beyond its operand";
      return false;
    }
    sizes->push_back(size);
    seen->push_back(static_cast<const char*>(arg->untyped_data()) +
                    offset * static_cast<long>(ffi::ByteWidth(dtype)));
    total += size;
  }
  if (total != nstate) {
    *error = "impl 'c': the state fields hold " + std::to_string(total) +
             " values per world, the state row " + std::to_string(nstate);
    return false;
  }
  return true;
}

template <typename T, typename P>
std::vector<T*> Typed(const std::vector<P*>& p) {
  std::vector<T*> out;
  for (P* x : p) out.push_back(static_cast<T*>(x));
  return out;
}

// Sim::Run on operands and results of the data's float type T.
template <typename T>
ffi::Error RunTyped(Sim* sim, const Plan& plan, int steps, const uint32_t* state,
                    const std::vector<const void*>& seen, const std::vector<long>& sizes,
                    ffi::AnyBuffer shared, long shared_offset, ffi::AnyBuffer per_world,
                    const Results& results, int32_t* flags) {
  return sim->Run<T>(plan, steps, state, Typed<const T>(seen), sizes,
                     shared.typed_data<T>() + shared_offset,
                     per_world.typed_data<T>(), results.bits, Typed<T>(results.fields),
                     Typed<T>(results.outputs), flags);
}

// What both handlers share: find the batch and the plan, check the operands,
// then Run with the results in `place` (which fills a Results, given the sizes of
// the state fields and the plan). The shared model fields lie side by side from
// `shared_offset` of `shared` (-1: `shared` holds them and nothing else).
template <typename PlaceFn>
ffi::Error Call(ffi::Buffer<ffi::U32> state, ffi::AnyBuffer shared, int64_t shared_offset,
                ffi::AnyBuffer per_world, ffi::RemainingArgs& fields, size_t nfields,
                std::string_view views, int32_t* flags, size_t nflags, int64_t token,
                std::string_view how, int64_t nstep, std::string_view outputs,
                std::string_view shared_fields, std::string_view world_fields,
                std::string_view setconst_fields, PlaceFn place) {
  NativeFloats native_floats;
  auto dims = state.dimensions();
  if (dims.size() != 3 || dims[2] != 2) {
    return ffi::Error::InvalidArgument("impl 'c': state must be (n, nstate, 2) uint32");
  }
  const int n = static_cast<int>(dims[0]);
  const long nstate = static_cast<long>(dims[1]);
  ffi::DataType dtype = shared.element_type();
  if (dtype != ffi::DataType::F32 && dtype != ffi::DataType::F64) {
    return ffi::Error::InvalidArgument("impl 'c': float operands must be float32 or float64");
  }
  if (per_world.element_type() != dtype) {
    return ffi::Error::InvalidArgument("impl 'c': float operands of different types");
  }
  std::shared_ptr<Host> host = Find(token);
  if (!host) return ffi::Error::Internal("impl 'c': the host of this call was released");
  std::string error;
  Sim* sim = SimOf(*host, n, &error);
  if (!sim) return ffi::Error::Internal(error);
  std::lock_guard<std::mutex> lock(sim->mu);
  if (sim->nstate != nstate) {
    return ffi::Error::InvalidArgument("impl 'c': state rows of " + std::to_string(nstate) +
                                       " values, the model's have " +
                                       std::to_string(sim->nstate));
  }
  const Plan* plan = sim->Resolve(how, outputs, shared_fields, world_fields, setconst_fields, &error);
  if (!plan) return ffi::Error::Internal(error);
  const long shared_count = static_cast<long>(shared.element_count());
  if ((shared_offset < 0 ? shared_count != plan->nshared
                         : shared_offset + plan->nshared > shared_count) ||
      per_world.element_count() != static_cast<size_t>(n * plan->nper_world) ||
      nflags != static_cast<size_t>(2 * n)) {
    return ffi::Error::InvalidArgument("impl 'c': operand or result sizes disagree with the call");
  }
  std::vector<const void*> seen;
  std::vector<long> sizes;
  Results results;
  if (!Seen(fields, nfields, views, n, nstate, dtype, &seen, &sizes, &error) ||
      !place(sizes, *plan, n, nstate, dtype, &results, &error)) {
    return ffi::Error::InvalidArgument(error);
  }
  const uint32_t* in = state.typed_data();
  const int steps = static_cast<int>(nstep);
  auto run = dtype == ffi::DataType::F32 ? RunTyped<float> : RunTyped<double>;
  return run(sim, *plan, steps, in, seen, sizes, shared, std::max<long>(shared_offset, 0),
             per_world, results, flags);
}

// Results of their own: bits, flags, then each state field and each output.
ffi::Error HostCall(ffi::Buffer<ffi::U32> state, ffi::AnyBuffer shared, ffi::AnyBuffer per_world,
                    ffi::RemainingArgs fields, ffi::Result<ffi::Buffer<ffi::U32>> bits,
                    ffi::Result<ffi::Buffer<ffi::S32>> flags, ffi::RemainingRets rets,
                    int64_t token, std::string_view how, int64_t nstep,
                    std::string_view outputs, std::string_view shared_fields,
                    std::string_view world_fields, std::string_view setconst_fields) {
  auto place = [&](const std::vector<long>& sizes, const Plan& plan, int n, long nstate,
                   ffi::DataType dtype, Results* out, std::string* error) {
    if (rets.size() != sizes.size() + plan.outputs.size() ||
        bits->element_count() != static_cast<size_t>(2 * n * nstate)) {
      *error = "impl 'c': results disagree with the call's outputs";
      return false;
    }
    out->bits = bits->typed_data();
    for (size_t k = 0; k < rets.size(); ++k) {
      auto ret = rets.get<ffi::AnyBuffer>(k);
      const long size = k < sizes.size() ? sizes[k] : plan.outputs[k - sizes.size()].size;
      if (!ret.has_value() || (*ret)->element_type() != dtype ||
          (*ret)->element_count() != static_cast<size_t>(n * size)) {
        *error = "impl 'c': a result of another type or size";
        return false;
      }
      (k < sizes.size() ? out->fields : out->outputs).push_back((*ret)->untyped_data());
    }
    return true;
  };
  return Call(state, shared, -1, per_world, fields, fields.size(), "", flags->typed_data(),
              flags->element_count(), token, how, nstep, outputs, shared_fields, world_fields,
              setconst_fields, place);
}

// Results in place: the operands after the state fields are buffers (a packed
// state) that XLA aliases to the results after flags; `places` says where in them
// the bits, each state field and each output go. The rest of each buffer is left
// as it came.
ffi::Error PlacedHostCall(ffi::Buffer<ffi::U32> state, ffi::AnyBuffer shared,
                          ffi::AnyBuffer per_world, ffi::RemainingArgs args,
                          ffi::Result<ffi::Buffer<ffi::S32>> flags, ffi::RemainingRets dests,
                          int64_t token, std::string_view how, int64_t nstep,
                          std::string_view outputs, std::string_view shared_fields,
                          std::string_view world_fields, std::string_view setconst_fields,
                          std::string_view places, std::string_view views,
                          int64_t shared_offset) {
  if (args.size() < dests.size()) {
    return ffi::Error::InvalidArgument("impl 'c': fewer operands than placed buffers");
  }
  // XLA aliases each buffer to its result; where it did not, the result starts as
  // a copy, so that what the call does not write is as it came either way.
  const size_t first = args.size() - dests.size();
  for (size_t k = 0; k < dests.size(); ++k) {
    auto in = args.get<ffi::AnyBuffer>(first + k);
    auto out = dests.get<ffi::AnyBuffer>(k);
    if (!in.has_value() || !out.has_value() || in->size_bytes() != (*out)->size_bytes()) {
      return ffi::Error::InvalidArgument("impl 'c': a placed buffer and its result differ");
    }
    if (in->untyped_data() != (*out)->untyped_data()) {
      std::memcpy((*out)->untyped_data(), in->untyped_data(), in->size_bytes());
    }
  }
  auto place = [&](const std::vector<long>& sizes, const Plan& plan, int n, long nstate,
                   ffi::DataType dtype, Results* out, std::string* error) {
    return Place(places, dests, sizes, plan, n, nstate, dtype, out, error);
  };
  return Call(state, shared, shared_offset, per_world, args, args.size() - dests.size(), views,
              flags->typed_data(),
              flags->element_count(), token, how, nstep, outputs, shared_fields, world_fields,
              setconst_fields, place);
}

// The attributes both handlers take after their operands and results, in the
// order of their parameters (native_ffi.call passes the same names).
template <typename Binding>
auto WithCallAttrs(Binding binding) {
  return std::move(binding)
      .template Attr<int64_t>("host")
      .template Attr<std::string_view>("how")
      .template Attr<int64_t>("nstep")
      .template Attr<std::string_view>("outputs")
      .template Attr<std::string_view>("shared_fields")
      .template Attr<std::string_view>("world_fields")
      .template Attr<std::string_view>("setconst_fields");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(MjxrHostCall, HostCall,
                              WithCallAttrs(ffi::Ffi::Bind()
                                                .Arg<ffi::Buffer<ffi::U32>>()  // state
                                                .Arg<ffi::AnyBuffer>()         // shared
                                                .Arg<ffi::AnyBuffer>()         // per_world
                                                .RemainingArgs()  // state fields
                                                .Ret<ffi::Buffer<ffi::U32>>()  // bits
                                                .Ret<ffi::Buffer<ffi::S32>>()  // flags
                                                .RemainingRets()));  // state fields, outputs

XLA_FFI_DEFINE_HANDLER_SYMBOL(MjxrPlacedHostCall, PlacedHostCall,
                              WithCallAttrs(ffi::Ffi::Bind()
                                                .Arg<ffi::Buffer<ffi::U32>>()  // state
                                                .Arg<ffi::AnyBuffer>()         // shared
                                                .Arg<ffi::AnyBuffer>()         // per_world
                                                .RemainingArgs()  // state fields, buffers
                                                .Ret<ffi::Buffer<ffi::S32>>()  // flags
                                                .RemainingRets())  // the buffers, aliased
                                  .Attr<std::string_view>("places")
                                  .Attr<std::string_view>("views")
                                  .Attr<int64_t>("shared_offset"));

extern "C" {

// The ABI of this file: Python checks it before use.
MJXR_EXPORT int mjxr_version() { return 4; }

// Makes `token` name the host model at `model` (an mjModel*), stepped on `nthread`
// threads. The model must stay alive until mjxr_release(token).
MJXR_EXPORT void mjxr_register(int64_t token, const void* model,
                                                          int nthread) {
  auto host = std::make_shared<Host>();
  host->model = static_cast<const mjModel*>(model);
  host->nthread = nthread;
  std::lock_guard<std::mutex> lock(registry_mu);
  registry[token] = std::move(host);
}

// Frees the batches of `token`'s host (after any call in progress on them).
MJXR_EXPORT void mjxr_release(int64_t token) {
  std::shared_ptr<Host> host;
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    auto it = registry.find(token);
    if (it == registry.end()) return;
    host = std::move(it->second);
    registry.erase(it);
  }
  std::lock_guard<std::mutex> lock(host->mu);
  host->released = true;
  for (auto& [n, sim] : host->sims) {
    std::lock_guard<std::mutex> sim_lock(sim->mu);
    mjb_deleteBatch(sim->batch);
    sim->batch = nullptr;
  }
  host->sims.clear();
}

// The model fields given per-world values in the batch of `n` worlds of `token`'s
// host, comma-separated, into `out` (at most `size` bytes with the terminating 0);
// returns the length needed, or -1 if there is no such batch.
MJXR_EXPORT int mjxr_expanded(int64_t token, int n, char* out,
                                                         int size) {
  std::shared_ptr<Host> host = Find(token);
  if (!host) return -1;
  Sim* sim;
  {
    std::lock_guard<std::mutex> lock(host->mu);
    auto it = host->sims.find(n);
    if (it == host->sims.end()) return -1;
    sim = it->second.get();
  }
  std::string text;
  {
    std::lock_guard<std::mutex> lock(sim->mu);
    for (const std::string& path : sim->expanded) {
      if (!text.empty()) text += ",";
      text += path;
    }
  }
  if (size > 0) {
    size_t len = std::min(text.size(), static_cast<size_t>(size - 1));
    std::memcpy(out, text.data(), len);
    out[len] = 0;
  }
  return static_cast<int>(text.size());
}

}  // extern "C"
