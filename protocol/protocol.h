#pragma once
// The FIKIT wire protocol: binary UDP datagrams between the hook (clients) and fikit-scheduler.
// Little-endian, a 40-byte header, one fixed-layout payload per type, and optionally a 32-byte
// HMAC-SHA256 trailer (auth.h). docs/protocol.md is the reference; this file is its implementation.
// No allocation anywhere, so the hook can encode and decode on any thread.
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>

namespace fikit::protocol {

constexpr uint32_t kMagic = 0x54494B46;   // "FKIT" in little-endian byte order
constexpr uint16_t kVersion = 6;          // 3: sessions, epochs, 64-bit sequences, state directives;
                                          // 4: SM holds and partitions, estimators, memory, refusal reasons;
                                          // 5: a service's objective in its register;
                                          // 6: a job's own time slice (directive, heartbeat)
constexpr size_t kHeaderSize = 40;
constexpr size_t kMacSize = 32;           // HMAC-SHA256 trailer when kFlagMac is set
constexpr size_t kMaxDatagram = 512;      // the largest message (a register) with its MAC fits
constexpr size_t kMaxKeyLength = 127;     // task keys (hook Config::task_key holds 128 with NUL)
constexpr int kPriorityLevels = 10;       // Q0 (highest) .. Q9
constexpr uint16_t kDefaultPort = 47800;  // fikit-scheduler's UDP port unless told otherwise (tests never use it)
// Limits of the fields settings travel in (the daemon checks its settings against them at start).
constexpr uint64_t kMaxU32Ns = UINT32_MAX;                 // u32 nanosecond fields: ~4.29 s
constexpr uint64_t kMinLeaseMs = 100, kMaxLeaseMs = 3'600'000;
constexpr uint64_t kMaxPredictedNs = 60'000'000'000ull;    // a kernel predicted longer than a minute is garbage

enum class Type : uint8_t {
  Register = 1, Registered = 2, Notify = 3, Idle = 4, Want = 5, Directive = 6, Heartbeat = 7,
  Goodbye = 8, Error = 9,
};
constexpr uint8_t kLastType = 9;

constexpr uint8_t kFlagMac = 1;           // header flags: a MAC trailer follows the payload

enum class TaskMode : uint8_t { Share = 0, Measure = 1 };
// How the task's GPU is shared: time-sliced contexts (the default compute mode) or MPS.
enum class Backend : uint8_t { TimeSlice = 0, Mps = 1 };
// What a task below the holder may do (docs/scheduling.md):
//   Run:  nothing above it is active; keep at most `bound_ns` of predicted work in flight.
//   Fill: something above is active; launch only on gap credit, or (MPS) kernels up to `overlap_ns`.
//   Hold: a task above is being measured; launch nothing.
enum class State : uint8_t { Run = 0, Fill = 1, Hold = 2 };

// Role flags in a directive.
constexpr uint8_t kRoleHolder = 1;     // the top-priority task: launches without limit
constexpr uint8_t kRoleActivity = 2;   // report activity (notify on the first launch after idle, idle
                                       // after a sync): lower tasks' states depend on it
constexpr uint8_t kRoleGaps = 4;       // holder: notify launches that open a fillable gap (someone wants credit)
constexpr uint8_t kRoleMask = kRoleHolder | kRoleActivity | kRoleGaps;

constexpr uint8_t kNotifyActivityStart = 1;   // notify flags: the first launch after idle
constexpr uint16_t kNoBellSlot = 0xFFFF;      // no slot on the bell board (bell.h)
constexpr uint16_t kBellSlots = 256;          // the bell board's slots: one per task (the daemon's task limit)
constexpr uint8_t kRegisterProfileGrew = 1;    // register flags: the client stored new kernels in its profile
constexpr uint8_t kWantProfiled = 1;          // want flags: the prediction comes from the client's profile

enum class ErrorCode : uint16_t { UnknownTask = 1, TooManyTasks = 2, BadRequest = 3 };
// Why a registration was refused (Error::reason; 0 with other codes).
enum class RefusalReason : uint16_t {
  None = 0, TaskLimit = 1, UserQuota = 2, SourceQuota = 3, GpuLimit = 4, KeyRequired = 5,
};
constexpr uint16_t kLastRefusalReason = 5;
// Directive confine flags (MPS): what runs beside an active task above at full width, and which
// launches run on the task's SM partition (a green context of partition_pct of the GPU's SMs)
// instead of waiting. docs/scheduling.md.
constexpr uint8_t kConfineActive = 1;       // while a task above is active: every launch not allowed at once
constexpr uint8_t kConfineLong = 2;         // always: launches whose SM hold is longer than short_hold_ns
constexpr uint8_t kConfineShortBeside = 4;  // launches whose SM hold is up to short_hold_ns run beside it
constexpr uint8_t kConfineBoundBeside = 8;  // long holds run beside it too, within the in-flight bound
constexpr uint8_t kConfineFree = 16;        // every launch goes at once, as without FIKIT (the regime free)
constexpr uint8_t kConfinePartition = kConfineActive | kConfineLong;   // these need partition_pct
constexpr uint8_t kConfineMask = kConfineActive | kConfineLong | kConfineShortBeside | kConfineBoundBeside | kConfineFree;
// How the daemon predicts (rules/kernel_rules.h), so the client predicts the same.
constexpr uint8_t kGapMean = 0, kGapP50 = 1, kGapP10 = 2;
constexpr uint8_t kDurationMean = 0, kDurationP50 = 1, kDurationP90 = 2;

struct Header {
  Type type = Type::Heartbeat;
  uint8_t flags = 0;
  uint64_t session = 0;   // the client's random session ID (never 0); a reply echoes it
  uint64_t epoch = 0;     // the daemon's boot epoch (random); 0 in a register from a client that has none
  uint64_t seq = 0;       // sender's sequence number, increasing per session and direction (never 0)
  uint32_t task = 0;      // the daemon's task ID within the session; 0 in a register
};

using DeviceUuid = std::array<uint8_t, 16>;   // all zeros: not given

// A task's registration, declared once: each row is a field of the register message, in wire order
// (docs/protocol.md). The Register struct below, its encoding, decoding and checks (protocol.cpp)
// come from this list, and so do the daemon's copies of the TASK rows (policy::Registration under
// the row's name, policy::TaskIdentity and status --json under its `kept_as` name: policy.h,
// snapshot.cpp). A new field is one row here plus its use; being a change of the wire format, it
// also takes a new kVersion and its line in docs/protocol.md.
//
//   TASK(name, type, default, valid, kept_as): what the client says of its task, kept with it by the
//                                               daemon and shown by status
//   WIRE(name, type, default, valid):          read by the daemon's server alone
//   type:  its C++ type, which is also its encoding: an unsigned integer little-endian in its own
//          width, an enum as its underlying integer, DeviceUuid as its 16 bytes (written as
//          protocol::X: the daemon's copies are declared in other namespaces)
//   valid: what encode sends and decode accepts, an expression of the field's value `v`
//          (protocol.cpp alone evaluates it)
// The key is the one field of variable length: its length is a row, its bytes follow the last row
// (Register::key below; encode and decode handle them after the rows).
#define FIKIT_REGISTER_FIELDS(TASK, WIRE)                                                                  \
  /* as asked: without the key the daemon may give it a lower one (policy: TaskIdentity::priority) */     \
  TASK(priority, uint8_t, 5, v < kPriorityLevels, requested_priority)                                     \
  TASK(mode, protocol::TaskMode, protocol::TaskMode::Share, v <= protocol::TaskMode::Measure, mode)       \
  TASK(backend, protocol::Backend, protocol::Backend::TimeSlice, v <= protocol::Backend::Mps, backend)    \
  /* kRegisterProfileGrew: the client stored new kernels; the daemon reads the profile again */           \
  WIRE(flags, uint8_t, 0, !(v & ~kRegisterProfileGrew))                                                   \
  TASK(pid, uint32_t, 0, true, pid)                                                                       \
  /* the GPU, which picks the daemon's scheduling domain (all zeros: not given) */                        \
  WIRE(device, protocol::DeviceUuid, {}, true)                                                            \
  WIRE(key_length, uint16_t, 0, v >= 1 && v <= kMaxKeyLength)                                             \
  /* the GPU's SMs and memory in bytes as the client sees them (0: not known) */                          \
  TASK(sm_count, uint16_t, 0, true, sm_count)                                                             \
  TASK(memory_total, uint64_t, 0, true, memory_total)                                                     \
  /* the process's own limit on its device memory (0: none) */                                            \
  TASK(memory_limit, uint64_t, 0, true, memory_limit)                                                     \
  /* a service's objective (objective.h; 0: the daemon's default); in force: TaskStatus's */              \
  TASK(objective_permille, uint32_t, 0, valid_objective_permille(v), requested_objective_permille)

// For a list that takes only one kind of row: FIKIT_REGISTER_FIELDS(X, FIKIT_REGISTER_SKIP).
#define FIKIT_REGISTER_SKIP(...)

struct Register {
#define FIKIT_REGISTER_MEMBER(name, type, initial, ...) type name = initial;
  FIKIT_REGISTER_FIELDS(FIKIT_REGISTER_MEMBER, FIKIT_REGISTER_MEMBER)
#undef FIKIT_REGISTER_MEMBER
  char key[kMaxKeyLength + 1] = {};   // NUL-terminated copy
  std::string_view key_view() const { return {key, key_length}; }
};
// The daemon's decision for one task; sent whenever it changes and in answer to heartbeats.
struct Directive {
  uint8_t role = 0;
  State state = State::Run;
  uint32_t generation = 0;       // increases with each change: a reordered older one is ignored
  uint32_t bound_ns = 0;         // predicted GPU work a task may keep in flight (Run, and Fill overlap)
  uint32_t short_hold_ns = 0;    // MPS: launches whose SM hold is up to this may run beside an active holder
  uint64_t credit_ns = 0;        // Fill: predicted work it may launch now...
  uint64_t credit_until_ns = 0;  // ...each launch ending by then (CLOCK_MONOTONIC, same host). Run:
                                 // a launch whose work in flight ends by then goes whatever the bound
  uint64_t cause_ns = 0;         // the launch time of the holder's launch that caused this change (0: none)
  // The holder's bell (bell.h), for a task below it: its slot, and the last activity start of it the
  // daemon had heard of. A higher generation in that slot means the holder is back and the daemon's
  // directive is on its way: stop as in Fill meanwhile.
  uint16_t watch_slot = kNoBellSlot;
  uint32_t watch_generation = 0;
  // MPS: the share of the GPU's SMs (percent, 0: none) of the task's partition, and which launches
  // go there instead of waiting (kConfine*).
  uint8_t partition_pct = 0;
  uint8_t confine = 0;
  uint64_t return_ns = 0;        // Run: when the task above is predicted back (CLOCK_MONOTONIC; 0: not predicted)
  uint64_t memory_cap = 0;       // device memory the task may hold (bytes; 0: no cap from the daemon)
  // Time-sliced: the time slice the task's own contexts run at (us; 0: each its driver's default),
  // so that the GPU switches it out within that when a task above has work (the regime preempt).
  uint16_t slice_us = 0;
};
struct Registered {
  uint32_t lease_ms = 0;
  uint8_t priority = 0;          // effective (an unauthenticated client may be capped below what it asked)
  uint16_t bell_slot = kNoBellSlot;   // where this task rings when its activity starts
  uint32_t min_gap_ns = 0;       // the holder notifies only launches opening gaps of at least this...
  uint32_t grant_latency_ns = 0; // ...that a fill can still reach (docs/scheduling.md)
  uint8_t gap_estimator = kGapMean, duration_estimator = kDurationP90;   // the daemon's predictions
  uint16_t boundary_permille = 500;   // a kernel followed by more iteration ends than this has no gap
  Directive directive;
};
// activity_generation: with kNotifyActivityStart, the count of activity starts rung on the bell.
struct Notify { uint64_t kernel_id = 0; uint64_t launched_ns = 0; uint8_t flags = 0; uint32_t activity_generation = 0; };
// The task's GPU work drained at a synchronisation; the last kernel it launched tells the daemon
// whether that ends an iteration or is a pause inside one.
struct Idle { uint64_t last_kernel_id = 0; };
struct Want { uint64_t kernel_id = 0; uint64_t predicted_ns = 0; uint8_t flags = 0; };
// A sign of life; with what the task's allocations hold on its GPU (0: not accounted), how many it
// refused over its limit, and the daemon's memory cap it applies, in MiB rounded up (0: none): the
// daemon counts a cap it sent as in force until a heartbeat says it arrived (docs/memory.md).
// And the time slice its own contexts run at as it applied the directive's (0: their default;
// kSliceRefused: the directive asked for one and the driver, or the hook, could not set it).
struct Heartbeat {
  uint64_t memory_used = 0; uint32_t memory_refusals = 0; uint32_t memory_cap_mib = 0;
  uint16_t slice_us = 0;
};
constexpr uint16_t kSliceRefused = 0xFFFF;
// The longest slice a job (priority above 0) takes, whatever a directive says: never longer than
// a GPU's default (1-2 ms), so that nothing answering on the daemon's port can make a job hold the
// GPU longer against a service.
constexpr uint16_t kMaxJobSliceUs = 1000;
// A cap as a heartbeat carries it: MiB, rounded up.
constexpr uint32_t cap_mib(uint64_t bytes) noexcept {
  const uint64_t mib = (bytes >> 20) + ((bytes & ((1u << 20) - 1)) != 0);
  return mib > UINT32_MAX ? UINT32_MAX : uint32_t(mib);
}
struct Goodbye {};
struct Error {
  ErrorCode code = ErrorCode::BadRequest;
  uint32_t retry_after_ms = 0;
  RefusalReason reason = RefusalReason::None;   // with TooManyTasks: which limit
};

using Body = std::variant<Register, Registered, Notify, Idle, Want, Directive, Heartbeat, Goodbye, Error>;

struct Message {
  Header header;
  Body body;
};

enum class DecodeError : uint8_t { None, TooShort, TooLong, BadMagic, BadVersion, BadType, BadSize, BadField };
const char* to_string(DecodeError e) noexcept;
const char* to_string(Type t) noexcept;
const char* to_string(State s) noexcept;
const char* to_string(TaskMode m) noexcept;   // "share", "measure"
const char* to_string(Backend b) noexcept;    // "timeslice", "mps"
const char* to_string(RefusalReason r) noexcept;   // what was refused and why, for the client's log

// Whether a message type travels from client to daemon (the rest go the other way).
bool client_to_daemon(Type t) noexcept;

// Writes the datagram for `header` + `body` into `out`, without a MAC (auth.h adds one); returns its
// size, or 0 if `out` is too small or the body is not encodable (key too long or not printable, a
// field out of range). header.type is taken from body; header.flags must be 0 here.
size_t encode(Header header, const Body& body, std::span<uint8_t> out) noexcept;

// Validates every field and size of the header and the payload; with kFlagMac the last kMacSize
// bytes are the MAC (not checked here: auth.h). On error `out` is unspecified and the datagram must
// be dropped.
DecodeError decode(std::span<const uint8_t> in, Message& out) noexcept;

// Whether `key` can be a task key on the wire: 1..kMaxKeyLength printable ASCII characters.
bool valid_task_key(std::string_view key) noexcept;

// Helper for filling key fields (truncating keys longer than kMaxKeyLength).
void set_key(Register& r, std::string_view key) noexcept;

}  // namespace fikit::protocol
