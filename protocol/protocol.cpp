#include "protocol.h"

#include "objective.h"

#include <cstring>
#include <type_traits>

namespace fikit::protocol {
namespace {

// Little-endian cursor over an output buffer. `ok` goes false on overflow and stays false.
class Writer {
 public:
  explicit Writer(std::span<uint8_t> out) : out_(out) {}
  void u8(uint8_t v) { put(&v, 1); }
  void u16(uint16_t v) { uint8_t b[2] = {uint8_t(v), uint8_t(v >> 8)}; put(b, 2); }
  void u32(uint32_t v) { uint8_t b[4]; for (int i = 0; i < 4; ++i) b[i] = uint8_t(v >> (8 * i)); put(b, 4); }
  void u64(uint64_t v) { uint8_t b[8]; for (int i = 0; i < 8; ++i) b[i] = uint8_t(v >> (8 * i)); put(b, 8); }
  void zeros(size_t n) { for (size_t i = 0; i < n; ++i) u8(0); }
  void bytes(const void* p, size_t n) { put(static_cast<const uint8_t*>(p), n); }
  // A field by its type (FIKIT_REGISTER_FIELDS): an unsigned integer in its own width, an enum as
  // its underlying integer, a UUID as its bytes.
  template <class T>
  void field(const T& v) {
    if constexpr (std::is_enum_v<T>) {
      field(static_cast<std::underlying_type_t<T>>(v));
    } else if constexpr (std::is_same_v<T, DeviceUuid>) {
      bytes(v.data(), v.size());
    } else {
      static_assert(std::is_unsigned_v<T>, "a wire field is unsigned, an enum or a UUID");
      uint8_t b[sizeof v];
      for (size_t i = 0; i < sizeof v; ++i) b[i] = uint8_t(uint64_t(v) >> (8 * i));
      put(b, sizeof b);
    }
  }
  size_t size() const { return ok_ ? pos_ : 0; }

 private:
  void put(const uint8_t* p, size_t n) {
    if (!ok_ || out_.size() - pos_ < n) { ok_ = false; return; }
    std::memcpy(out_.data() + pos_, p, n);
    pos_ += n;
  }
  std::span<uint8_t> out_;
  size_t pos_ = 0;
  bool ok_ = true;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  uint8_t u8() { uint8_t b[1] = {0}; get(b, 1); return b[0]; }
  uint16_t u16() { uint8_t b[2] = {0, 0}; get(b, 2); return uint16_t(b[0] | (b[1] << 8)); }
  uint32_t u32() { uint8_t b[4] = {}; get(b, 4); uint32_t v = 0; for (int i = 3; i >= 0; --i) v = (v << 8) | b[i]; return v; }
  uint64_t u64() { uint8_t b[8] = {}; get(b, 8); uint64_t v = 0; for (int i = 7; i >= 0; --i) v = (v << 8) | b[i]; return v; }
  bool zeros(size_t n) { bool z = true; for (size_t i = 0; i < n; ++i) z &= (u8() == 0); return z; }
  void bytes(void* p, size_t n) { get(static_cast<uint8_t*>(p), n); }
  // A field by its type, as Writer::field writes it.
  template <class T>
  void field(T& v) {
    if constexpr (std::is_enum_v<T>) {
      std::underlying_type_t<T> u = 0;
      field(u);
      v = T(u);
    } else if constexpr (std::is_same_v<T, DeviceUuid>) {
      bytes(v.data(), v.size());
    } else {
      static_assert(std::is_unsigned_v<T>, "a wire field is unsigned, an enum or a UUID");
      uint8_t b[sizeof v] = {};
      get(b, sizeof b);
      uint64_t u = 0;
      for (size_t i = sizeof v; i-- > 0;) u = (u << 8) | b[i];
      v = T(u);
    }
  }
  size_t remaining() const { return in_.size() - pos_; }
  bool ok() const { return ok_; }

 private:
  void get(uint8_t* p, size_t n) {
    if (!ok_ || remaining() < n) { ok_ = false; return; }
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
  bool ok_ = true;
};

// Keys are printable ASCII: they end up in logs and the status table.
bool valid_key(const char* key, size_t n) {
  if (n == 0 || n > kMaxKeyLength) return false;
  for (size_t i = 0; i < n; ++i)
    if (static_cast<unsigned char>(key[i]) < 0x20 || static_cast<unsigned char>(key[i]) > 0x7e) return false;
  return true;
}

Type type_of(const Body& body) {
  static constexpr Type kTypes[] = {Type::Register, Type::Registered, Type::Notify, Type::Idle, Type::Want,
                                    Type::Directive, Type::Heartbeat, Type::Goodbye, Type::Error};
  return kTypes[body.index()];
}

constexpr size_t kDirectiveSize = 64;
// The register's rows (the key's bytes follow them).
constexpr size_t kRegisterFixedSize = 0
#define FIKIT_REGISTER_SIZE(name, type, ...) + sizeof(type)
    FIKIT_REGISTER_FIELDS(FIKIT_REGISTER_SIZE, FIKIT_REGISTER_SIZE);
#undef FIKIT_REGISTER_SIZE
constexpr size_t kRegisteredFixedSize = 20;

bool valid_directive_fields(const Directive& d) {
  return !(d.role & ~kRoleMask) && uint8_t(d.state) <= uint8_t(State::Hold) && d.partition_pct <= 100 &&
         !(d.confine & ~kConfineMask) && (!(d.confine & kConfinePartition) || d.partition_pct != 0) &&
         d.slice_us != kSliceRefused;
}

void write_directive(Writer& w, const Directive& d) {
  w.u8(d.role); w.u8(uint8_t(d.state)); w.u16(d.watch_slot);
  w.u32(d.generation); w.u32(d.bound_ns); w.u32(d.short_hold_ns);
  w.u64(d.credit_ns); w.u64(d.credit_until_ns); w.u64(d.cause_ns);
  w.u32(d.watch_generation); w.u8(d.partition_pct); w.u8(d.confine); w.u16(d.slice_us);
  w.u64(d.return_ns); w.u64(d.memory_cap);
}

bool read_directive(Reader& r, Directive& d) {
  d.role = r.u8();
  const uint8_t state = r.u8();
  d.watch_slot = r.u16();
  d.generation = r.u32(); d.bound_ns = r.u32(); d.short_hold_ns = r.u32();
  d.credit_ns = r.u64(); d.credit_until_ns = r.u64(); d.cause_ns = r.u64();
  d.watch_generation = r.u32();
  d.partition_pct = r.u8(); d.confine = r.u8();
  d.slice_us = r.u16();
  d.return_ns = r.u64(); d.memory_cap = r.u64();
  if (state > uint8_t(State::Hold)) return false;
  d.state = State(state);
  if (!valid_directive_fields(d)) return false;
  d.state = State(state);
  // Credit only comes with Fill, and never without an end.
  if (d.credit_ns != 0 && (d.state != State::Fill || d.credit_until_ns == 0 || d.credit_ns > kMaxPredictedNs))
    return false;
  return true;
}

bool valid_objective_permille(uint32_t permille) {
  return permille == 0 || (permille >= values::kMinObjectivePermille && permille <= values::kMaxObjectivePermille);
}

// Every row of the register within its `valid` (the key's bytes are checked apart: valid_key).
bool valid_register_rows(const Register& m) {
#define FIKIT_REGISTER_VALID(name, type, initial, valid, ...) \
  {                                                           \
    [[maybe_unused]] const type& v = m.name;                  \
    if (!(valid)) return false;                               \
  }
  FIKIT_REGISTER_FIELDS(FIKIT_REGISTER_VALID, FIKIT_REGISTER_VALID)
#undef FIKIT_REGISTER_VALID
  return true;
}

struct EncodeBody {
  Writer& w;
  bool ok = true;
  void operator()(const Register& m) {
    if (!valid_register_rows(m) || !valid_key(m.key, m.key_length)) {
      ok = false;
      return;
    }
#define FIKIT_REGISTER_WRITE(name, ...) w.field(m.name);
    FIKIT_REGISTER_FIELDS(FIKIT_REGISTER_WRITE, FIKIT_REGISTER_WRITE)
#undef FIKIT_REGISTER_WRITE
    w.bytes(m.key, m.key_length);
  }
  void operator()(const Registered& m) {
    if (m.lease_ms < kMinLeaseMs || m.lease_ms > kMaxLeaseMs || m.priority >= kPriorityLevels ||
        m.gap_estimator > kGapP10 || m.duration_estimator > kDurationP90 || m.boundary_permille > 1000 ||
        !valid_directive_fields(m.directive)) {
      ok = false;
      return;
    }
    w.u32(m.lease_ms); w.u8(m.priority); w.zeros(1); w.u16(m.bell_slot); w.u32(m.min_gap_ns);
    w.u32(m.grant_latency_ns); w.u8(m.gap_estimator); w.u8(m.duration_estimator); w.u16(m.boundary_permille);
    write_directive(w, m.directive);
  }
  void operator()(const Notify& m) {
    w.u64(m.kernel_id); w.u64(m.launched_ns); w.u8(m.flags); w.zeros(3); w.u32(m.activity_generation);
  }
  void operator()(const Idle& m) { w.u64(m.last_kernel_id); }
  void operator()(const Want& m) {
    if (m.predicted_ns == 0 || m.predicted_ns > kMaxPredictedNs) { ok = false; return; }
    w.u64(m.kernel_id); w.u64(m.predicted_ns); w.u8(m.flags); w.zeros(7);
  }
  void operator()(const Directive& m) {
    if (!valid_directive_fields(m)) { ok = false; return; }
    write_directive(w, m);
  }
  void operator()(const Heartbeat& m) { w.u64(m.memory_used); w.u32(m.memory_refusals); w.u32(m.memory_cap_mib); w.u16(m.slice_us); w.zeros(2); }
  void operator()(const Goodbye&) {}
  void operator()(const Error& m) {
    if (uint16_t(m.reason) > kLastRefusalReason || (m.reason != RefusalReason::None && m.code != ErrorCode::TooManyTasks)) {
      ok = false;
      return;
    }
    w.u16(uint16_t(m.code)); w.u16(uint16_t(m.reason)); w.u32(m.retry_after_ms);
  }
};

DecodeError decode_body(Type type, Reader& r, Body& body) {
  const size_t n = r.remaining();
  switch (type) {
    case Type::Register: {
      Register m;
      if (n < kRegisterFixedSize) return DecodeError::BadSize;
#define FIKIT_REGISTER_READ(name, ...) r.field(m.name);
      FIKIT_REGISTER_FIELDS(FIKIT_REGISTER_READ, FIKIT_REGISTER_READ)
#undef FIKIT_REGISTER_READ
      if (!valid_register_rows(m)) return DecodeError::BadField;
      if (r.remaining() != m.key_length) return DecodeError::BadSize;
      r.bytes(m.key, m.key_length);
      if (!valid_key(m.key, m.key_length)) return DecodeError::BadField;
      body = m;
      break;
    }
    case Type::Registered: {
      if (n != kRegisteredFixedSize + kDirectiveSize) return DecodeError::BadSize;
      Registered m;
      m.lease_ms = r.u32(); m.priority = r.u8();
      const bool pad = r.zeros(1);
      m.bell_slot = r.u16();
      m.min_gap_ns = r.u32(); m.grant_latency_ns = r.u32();
      m.gap_estimator = r.u8(); m.duration_estimator = r.u8(); m.boundary_permille = r.u16();
      if (!pad || m.lease_ms < kMinLeaseMs || m.lease_ms > kMaxLeaseMs || m.priority >= kPriorityLevels ||
          m.gap_estimator > kGapP10 || m.duration_estimator > kDurationP90 || m.boundary_permille > 1000 ||
          !read_directive(r, m.directive))
        return DecodeError::BadField;
      body = m;
      break;
    }
    case Type::Notify: {
      if (n != 24) return DecodeError::BadSize;
      Notify m; m.kernel_id = r.u64(); m.launched_ns = r.u64(); m.flags = r.u8();
      const bool pad = r.zeros(3);
      m.activity_generation = r.u32();
      if (!pad || (m.flags & ~kNotifyActivityStart)) return DecodeError::BadField;
      body = m;
      break;
    }
    case Type::Want: {
      if (n != 24) return DecodeError::BadSize;
      Want m; m.kernel_id = r.u64(); m.predicted_ns = r.u64(); m.flags = r.u8();
      if (!r.zeros(7) || (m.flags & ~kWantProfiled) || m.predicted_ns == 0 || m.predicted_ns > kMaxPredictedNs)
        return DecodeError::BadField;
      body = m;
      break;
    }
    case Type::Directive: {
      if (n != kDirectiveSize) return DecodeError::BadSize;
      Directive m;
      if (!read_directive(r, m)) return DecodeError::BadField;
      body = m;
      break;
    }
    case Type::Error: {
      if (n != 8) return DecodeError::BadSize;
      const uint16_t code = r.u16();
      const uint16_t reason = r.u16();
      const uint32_t retry = r.u32();
      if (code < 1 || code > 3 || reason > kLastRefusalReason ||
          (reason != 0 && ErrorCode(code) != ErrorCode::TooManyTasks))
        return DecodeError::BadField;
      body = Error{ErrorCode(code), retry, RefusalReason(reason)};
      break;
    }
    case Type::Idle: if (n != 8) return DecodeError::BadSize; body = Idle{r.u64()}; break;
    case Type::Heartbeat: {
      if (n != 20) return DecodeError::BadSize;
      Heartbeat m; m.memory_used = r.u64(); m.memory_refusals = r.u32(); m.memory_cap_mib = r.u32();
      m.slice_us = r.u16();
      if (!r.zeros(2)) return DecodeError::BadField;
      body = m;
      break;
    }
    case Type::Goodbye: if (n != 0) return DecodeError::BadSize; body = Goodbye{}; break;
    default: return DecodeError::BadType;
  }
  return r.ok() ? DecodeError::None : DecodeError::BadSize;
}

}  // namespace

const char* to_string(DecodeError e) noexcept {
  switch (e) {
    case DecodeError::None: return "ok";
    case DecodeError::TooShort: return "shorter than the header";
    case DecodeError::TooLong: return "longer than the largest datagram";
    case DecodeError::BadMagic: return "bad magic";
    case DecodeError::BadVersion: return "unsupported protocol version";
    case DecodeError::BadType: return "unknown message type";
    case DecodeError::BadSize: return "payload size does not match its type";
    case DecodeError::BadField: return "field out of range";
  }
  return "?";
}

const char* to_string(Type t) noexcept {
  switch (t) {
    case Type::Register: return "register";
    case Type::Registered: return "registered";
    case Type::Notify: return "notify";
    case Type::Idle: return "idle";
    case Type::Want: return "want";
    case Type::Directive: return "directive";
    case Type::Heartbeat: return "heartbeat";
    case Type::Goodbye: return "goodbye";
    case Type::Error: return "error";
  }
  return "?";
}

const char* to_string(State s) noexcept {
  switch (s) {
    case State::Run: return "run";
    case State::Fill: return "fill";
    case State::Hold: return "hold";
  }
  return "?";
}

const char* to_string(TaskMode m) noexcept {
  switch (m) {
    case TaskMode::Share: return "share";
    case TaskMode::Measure: return "measure";
  }
  return "?";
}

const char* to_string(Backend b) noexcept {
  switch (b) {
    case Backend::TimeSlice: return "timeslice";
    case Backend::Mps: return "mps";
  }
  return "?";
}

const char* to_string(RefusalReason r) noexcept {
  switch (r) {
    case RefusalReason::None: return "it schedules as many tasks as it can";
    case RefusalReason::TaskLimit: return "it schedules as many tasks on this GPU as it can";
    case RefusalReason::UserQuota: return "this user's programs hold as many tasks as a user may";
    case RefusalReason::SourceQuota: return "this address's programs hold as many tasks as an address may";
    case RefusalReason::GpuLimit: return "this user's programs use as many GPUs as a user may, or it schedules as many GPUs as it can";
    case RefusalReason::KeyRequired: return "the tasks left are for programs with its key (FIKIT_KEY_FILE)";
  }
  return "?";
}

bool client_to_daemon(Type t) noexcept {
  switch (t) {
    case Type::Register: case Type::Notify: case Type::Idle: case Type::Want: case Type::Heartbeat:
    case Type::Goodbye:
      return true;
    default:
      return false;
  }
}

size_t encode(Header header, const Body& body, std::span<uint8_t> out) noexcept {
  if (header.flags != 0) return 0;
  if (out.size() > kMaxDatagram - kMacSize) out = out.first(kMaxDatagram - kMacSize);
  Writer w(out);
  w.u32(kMagic);
  w.u16(kVersion);
  w.u8(uint8_t(type_of(body)));
  w.u8(0);
  w.u64(header.session);
  w.u64(header.epoch);
  w.u64(header.seq);
  w.u32(header.task);
  w.zeros(4);
  EncodeBody enc{w};
  std::visit(enc, body);
  return enc.ok ? w.size() : 0;
}

DecodeError decode(std::span<const uint8_t> in, Message& out) noexcept {
  if (in.size() < kHeaderSize) return DecodeError::TooShort;
  if (in.size() > kMaxDatagram) return DecodeError::TooLong;
  Reader h(in.first(kHeaderSize));
  if (h.u32() != kMagic) return DecodeError::BadMagic;
  if (h.u16() != kVersion) return DecodeError::BadVersion;
  const uint8_t type = h.u8();
  const uint8_t flags = h.u8();
  if (type < 1 || type > kLastType) return DecodeError::BadType;
  if (flags & ~kFlagMac) return DecodeError::BadField;
  out.header.type = Type(type);
  out.header.flags = flags;
  out.header.session = h.u64();
  out.header.epoch = h.u64();
  out.header.seq = h.u64();
  out.header.task = h.u32();
  if (!h.zeros(4) || out.header.session == 0 || out.header.seq == 0) return DecodeError::BadField;
  size_t end = in.size();
  if (flags & kFlagMac) {
    if (end < kHeaderSize + kMacSize) return DecodeError::BadSize;
    end -= kMacSize;
  }
  Reader r(in.subspan(kHeaderSize, end - kHeaderSize));
  return decode_body(out.header.type, r, out.body);
}

bool valid_task_key(std::string_view key) noexcept { return valid_key(key.data(), key.size()); }

void set_key(Register& r, std::string_view key) noexcept {
  r.key_length = static_cast<uint16_t>(key.size() < kMaxKeyLength ? key.size() : kMaxKeyLength);
  std::memcpy(r.key, key.data(), r.key_length);
  r.key[r.key_length] = '\0';
}

}  // namespace fikit::protocol
