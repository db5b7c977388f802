#include "protocol.h"

#include <cstring>

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
  void bytes(const char* p, size_t n) { put(reinterpret_cast<const uint8_t*>(p), n); }
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
  void bytes(char* p, size_t n) { get(reinterpret_cast<uint8_t*>(p), n); }
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
  static constexpr Type kTypes[] = {Type::Register, Type::Registered, Type::LaunchNotify, Type::LaunchRequest,
                                    Type::Queued, Type::Grant, Type::Role, Type::Idle, Type::Heartbeat,
                                    Type::Goodbye, Type::StatusQuery, Type::StatusReply, Type::Error};
  return kTypes[body.index()];
}

void write_header(Writer& w, Type type, uint32_t task_id, uint32_t seq) {
  w.u32(kMagic);
  w.u16(kVersion);
  w.u16(static_cast<uint16_t>(type));
  w.u32(task_id);
  w.u32(seq);
}

struct EncodeBody {
  Writer& w;
  bool ok = true;
  void operator()(const Register& m) {
    if (!valid_key(m.key, m.key_length) || m.priority >= kPriorityLevels) { ok = false; return; }
    w.u8(m.priority); w.u8(static_cast<uint8_t>(m.mode)); w.u16(m.key_length); w.u32(m.pid);
    w.bytes(m.key, m.key_length);
  }
  void operator()(const Registered& m) {
    w.u32(m.lease_ms); w.u8(m.role); w.zeros(3); w.u32(m.fill_min_gap_ns); w.u32(m.grant_latency_ns);
  }
  void operator()(const LaunchNotify& m) { w.u64(m.kernel_id); w.u64(m.launched_ns); }
  void operator()(const LaunchRequest& m) { w.u64(m.kernel_id); w.u64(m.predicted_ns); w.u8(m.flags); w.zeros(7); }
  void operator()(const Queued& m) { w.u32(m.position); w.zeros(4); }
  void operator()(const Grant& m) { w.u64(m.credit_ns); w.u64(m.deadline_ns); }
  void operator()(const Role& m) { w.u8(m.flags); w.zeros(3); w.u32(m.epoch); }
  void operator()(const Idle&) {}
  void operator()(const Heartbeat&) {}
  void operator()(const Goodbye&) {}
  void operator()(const StatusQuery&) {}
  void operator()(const Error& m) { w.u16(static_cast<uint16_t>(m.code)); w.zeros(2); }
  void operator()(const StatusReply& m) {
    if (m.tasks.size() > kMaxStatusTasks) { ok = false; return; }
    for (uint64_t v : {m.uptime_ns, m.grants, m.fills, m.free_run_grants, m.early_stops, m.gaps_predicted,
                       m.dropped_datagrams, m.lease_expiries, m.notifications, m.requests})
      w.u64(v);
    w.u32(m.holder_task_id);
    w.u16(static_cast<uint16_t>(m.tasks.size()));
    w.zeros(2);
    for (const TaskStatus& t : m.tasks) {
      if (!valid_key(t.key, t.key_length)) { ok = false; return; }
      w.u32(t.task_id); w.u32(t.pid);
      w.u8(t.priority); w.u8(static_cast<uint8_t>(t.mode)); w.u8(t.role); w.u8(t.active);
      w.u32(t.queue_length);
      w.u64(t.grants); w.u64(t.fills); w.u64(t.notifications); w.u64(t.requests);
      w.u16(t.key_length);
      w.bytes(t.key, t.key_length);
    }
  }
};

// Every fixed-size payload; StatusReply and Register are variable and checked by their decoders.
size_t fixed_payload_size(Type t) {
  switch (t) {
    case Type::Queued: case Type::Role: return 8;
    case Type::LaunchRequest: return 24;
    case Type::Grant: case Type::Registered: case Type::LaunchNotify: return 16;
    case Type::Idle: case Type::Heartbeat: case Type::Goodbye: case Type::StatusQuery: return 0;
    case Type::Error: return 4;
    default: return SIZE_MAX;
  }
}

DecodeError decode_body(Type type, Reader& r, Body& body) {
  auto fixed = [&](size_t n) { return r.remaining() == n; };
  switch (type) {
    case Type::Register: {
      Register m;
      if (r.remaining() < 8) return DecodeError::BadSize;
      m.priority = r.u8();
      uint8_t mode = r.u8();
      m.key_length = r.u16();
      m.pid = r.u32();
      if (m.priority >= kPriorityLevels || mode > 1) return DecodeError::BadField;
      m.mode = static_cast<TaskMode>(mode);
      if (m.key_length == 0 || m.key_length > kMaxKeyLength) return DecodeError::BadField;
      if (r.remaining() != m.key_length) return DecodeError::BadSize;
      r.bytes(m.key, m.key_length);
      if (!valid_key(m.key, m.key_length)) return DecodeError::BadField;
      body = m;
      return DecodeError::None;
    }
    case Type::StatusReply: {
      StatusReply m;
      if (r.remaining() < 10 * 8 + 8) return DecodeError::BadSize;
      for (uint64_t* v : {&m.uptime_ns, &m.grants, &m.fills, &m.free_run_grants, &m.early_stops,
                          &m.gaps_predicted, &m.dropped_datagrams, &m.lease_expiries, &m.notifications, &m.requests})
        *v = r.u64();
      m.holder_task_id = r.u32();
      uint16_t n = r.u16();
      if (!r.zeros(2)) return DecodeError::BadField;
      if (n > kMaxStatusTasks) return DecodeError::BadField;
      m.tasks.resize(n);
      for (TaskStatus& t : m.tasks) {
        constexpr size_t kFixed = 4 + 4 + 4 + 4 + 32 + 2;
        if (r.remaining() < kFixed) return DecodeError::BadSize;
        t.task_id = r.u32(); t.pid = r.u32();
        t.priority = r.u8();
        uint8_t mode = r.u8();
        t.role = r.u8(); t.active = r.u8();
        t.queue_length = r.u32();
        t.grants = r.u64(); t.fills = r.u64(); t.notifications = r.u64(); t.requests = r.u64();
        t.key_length = r.u16();
        if (t.priority >= kPriorityLevels || mode > 1 || (t.role & ~kRoleMask) || t.active > 1)
          return DecodeError::BadField;
        t.mode = static_cast<TaskMode>(mode);
        if (t.key_length == 0 || t.key_length > kMaxKeyLength) return DecodeError::BadField;
        if (r.remaining() < t.key_length) return DecodeError::BadSize;
        r.bytes(t.key, t.key_length);
        if (!valid_key(t.key, t.key_length)) return DecodeError::BadField;
      }
      if (r.remaining() != 0) return DecodeError::BadSize;
      body = std::move(m);
      return DecodeError::None;
    }
    default: break;
  }
  if (!fixed(fixed_payload_size(type))) return DecodeError::BadSize;
  switch (type) {
    case Type::Registered: {
      Registered m; m.lease_ms = r.u32(); m.role = r.u8();
      if (!r.zeros(3) || (m.role & ~kRoleMask) || m.lease_ms == 0) return DecodeError::BadField;
      m.fill_min_gap_ns = r.u32(); m.grant_latency_ns = r.u32();
      body = m; break;
    }
    case Type::LaunchNotify: { LaunchNotify m; m.kernel_id = r.u64(); m.launched_ns = r.u64(); body = m; break; }
    case Type::LaunchRequest: {
      LaunchRequest m; m.kernel_id = r.u64(); m.predicted_ns = r.u64(); m.flags = r.u8();
      if (!r.zeros(7) || (m.flags & ~kRequestProfiled) || m.predicted_ns == 0 || m.predicted_ns > kMaxDurationNs)
        return DecodeError::BadField;
      body = m; break;
    }
    case Type::Queued: {
      Queued m; m.position = r.u32();
      if (!r.zeros(4)) return DecodeError::BadField;
      body = m; break;
    }
    case Type::Grant: {
      Grant m; m.credit_ns = r.u64(); m.deadline_ns = r.u64();
      if (m.credit_ns == 0 || m.credit_ns > kMaxDurationNs) return DecodeError::BadField;
      body = m; break;
    }
    case Type::Role: {
      Role m; m.flags = r.u8();
      bool pad = r.zeros(3);
      m.epoch = r.u32();
      if (!pad || (m.flags & ~kRoleMask)) return DecodeError::BadField;
      body = m; break;
    }
    case Type::Idle: body = Idle{}; break;
    case Type::Heartbeat: body = Heartbeat{}; break;
    case Type::Goodbye: body = Goodbye{}; break;
    case Type::StatusQuery: body = StatusQuery{}; break;
    case Type::Error: {
      uint16_t code = r.u16();
      if (!r.zeros(2) || code < 1 || code > 3) return DecodeError::BadField;
      body = Error{static_cast<ErrorCode>(code)}; break;
    }
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
    case Type::LaunchNotify: return "launch-notify";
    case Type::LaunchRequest: return "launch-request";
    case Type::Queued: return "queued";
    case Type::Grant: return "grant";
    case Type::Role: return "role";
    case Type::Idle: return "idle";
    case Type::Heartbeat: return "heartbeat";
    case Type::Goodbye: return "goodbye";
    case Type::StatusQuery: return "status-query";
    case Type::StatusReply: return "status-reply";
    case Type::Error: return "error";
  }
  return "?";
}

size_t encode(Header header, const Body& body, std::span<uint8_t> out) noexcept {
  if (out.size() > kMaxDatagram) out = out.first(kMaxDatagram);
  Writer w(out);
  write_header(w, type_of(body), header.task_id, header.seq);
  EncodeBody enc{w};
  std::visit(enc, body);
  return enc.ok ? w.size() : 0;
}

size_t encode_notify(uint32_t task_id, uint32_t seq, uint64_t kernel_id, std::span<uint8_t> out,
                     uint64_t launched_ns) noexcept {
  Writer w(out);
  write_header(w, Type::LaunchNotify, task_id, seq);
  w.u64(kernel_id);
  w.u64(launched_ns);
  return w.size();
}

DecodeError decode(std::span<const uint8_t> in, Message& out) {
  if (in.size() < kHeaderSize) return DecodeError::TooShort;
  if (in.size() > kMaxDatagram) return DecodeError::TooLong;
  Reader r(in);
  if (r.u32() != kMagic) return DecodeError::BadMagic;
  if (r.u16() != kVersion) return DecodeError::BadVersion;
  uint16_t type = r.u16();
  if (type < static_cast<uint16_t>(Type::Register) || type > static_cast<uint16_t>(Type::Error))
    return DecodeError::BadType;
  out.header.type = static_cast<Type>(type);
  out.header.task_id = r.u32();
  out.header.seq = r.u32();
  return decode_body(out.header.type, r, out.body);
}

void set_key(Register& r, std::string_view key) noexcept {
  r.key_length = static_cast<uint16_t>(key.size() < kMaxKeyLength ? key.size() : kMaxKeyLength);
  std::memcpy(r.key, key.data(), r.key_length);
  r.key[r.key_length] = '\0';
}

void set_key(TaskStatus& t, std::string_view key) noexcept {
  t.key_length = static_cast<uint16_t>(key.size() < kMaxKeyLength ? key.size() : kMaxKeyLength);
  std::memcpy(t.key, key.data(), t.key_length);
  t.key[t.key_length] = '\0';
}

}  // namespace fikit::protocol
