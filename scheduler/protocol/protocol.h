#pragma once
// The FIKIT wire protocol: binary UDP datagrams between the hook (clients) and fikit-scheduler.
// Little-endian, a 16-byte header, one fixed-layout payload per type. docs/protocol.md is the
// reference; this file is its implementation. No allocation except for StatusReply's task list,
// so the hook can encode and decode everything else on any thread.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <variant>
#include <vector>

namespace fikit::protocol {

constexpr uint32_t kMagic = 0x54494B46;   // "FKIT" in little-endian byte order
constexpr uint16_t kVersion = 2;   // 2: fill thresholds in registered, launch time in notify
constexpr size_t kHeaderSize = 16;
constexpr size_t kMaxDatagram = 16384;    // the daemon never sends or accepts more
constexpr size_t kMaxKeyLength = 127;     // task keys (hook Config::task_key holds 128 with NUL)
constexpr size_t kMaxStatusTasks = 64;    // a status reply lists at most this many tasks
constexpr int kPriorityLevels = 10;       // Q0 (highest) .. Q9
constexpr uint64_t kMaxDurationNs = 60'000'000'000ull;  // a predicted kernel longer than a minute is garbage

enum class Type : uint16_t {
  Register = 1, Registered = 2, LaunchNotify = 3, LaunchRequest = 4, Queued = 5, Grant = 6,
  Role = 7, Idle = 8, Heartbeat = 9, Goodbye = 10, StatusQuery = 11, StatusReply = 12, Error = 13,
};

enum class TaskMode : uint8_t { Share = 0, Measure = 1 };

// Role flags (daemon -> client).
constexpr uint8_t kRoleHolder = 1;   // launch without asking
constexpr uint8_t kRoleNotify = 2;   // holder: send LaunchNotify for each launch (someone waits)
constexpr uint8_t kRoleRevoke = 4;   // drop any unused free-run credit now
constexpr uint8_t kRoleMask = kRoleHolder | kRoleNotify | kRoleRevoke;

constexpr uint8_t kRequestProfiled = 1;  // LaunchRequest: the client's prediction comes from a profile

enum class ErrorCode : uint16_t { UnknownTask = 1, TooManyTasks = 2, BadRequest = 3 };

struct Header {
  Type type = Type::Heartbeat;
  uint32_t task_id = 0;   // 0 before registration
  uint32_t seq = 0;       // sender's sequence number; replies echo the request's
};

struct Register {
  uint8_t priority = 5;
  TaskMode mode = TaskMode::Share;
  uint32_t pid = 0;
  uint16_t key_length = 0;
  char key[kMaxKeyLength + 1] = {};   // NUL-terminated copy
  std::string_view key_view() const { return {key, key_length}; }
};
// fill_min_gap_ns / grant_latency_ns: the daemon's min-gap and grant-latency settings, so the holder
// can skip notifications after kernels whose gap no fill could use (0, 0: notify every launch).
struct Registered {
  uint32_t lease_ms = 0;
  uint8_t role = 0;
  uint32_t fill_min_gap_ns = 0, grant_latency_ns = 0;
};
// launched_ns: when the holder launched it (CLOCK_MONOTONIC, same host; 0: unknown), so the daemon
// predicts the gap from the launch, not from the datagram's late arrival on a busy machine.
struct LaunchNotify { uint64_t kernel_id = 0; uint64_t launched_ns = 0; };
struct LaunchRequest { uint64_t kernel_id = 0; uint64_t predicted_ns = 0; uint8_t flags = 0; };
struct Queued { uint32_t position = 0; };
struct Grant { uint64_t credit_ns = 0; uint64_t deadline_ns = 0; };   // CLOCK_MONOTONIC, same host
struct Role { uint8_t flags = 0; uint32_t epoch = 0; };
struct Idle {};
struct Heartbeat {};
struct Goodbye {};
struct StatusQuery {};
struct Error { ErrorCode code = ErrorCode::BadRequest; };

struct TaskStatus {
  uint32_t task_id = 0, pid = 0;
  uint8_t priority = 0;
  TaskMode mode = TaskMode::Share;
  uint8_t role = 0;
  uint8_t active = 0;
  uint32_t queue_length = 0;
  uint64_t grants = 0, fills = 0, notifications = 0, requests = 0;
  std::string_view key_view() const { return {key, key_length}; }
  uint16_t key_length = 0;
  char key[kMaxKeyLength + 1] = {};
};
struct StatusReply {
  uint64_t uptime_ns = 0;
  uint64_t grants = 0, fills = 0, free_run_grants = 0, early_stops = 0, gaps_predicted = 0;
  uint64_t dropped_datagrams = 0, lease_expiries = 0, notifications = 0, requests = 0;
  uint32_t holder_task_id = 0;   // 0: no holder
  std::vector<TaskStatus> tasks;
};

using Body = std::variant<Register, Registered, LaunchNotify, LaunchRequest, Queued, Grant, Role, Idle,
                          Heartbeat, Goodbye, StatusQuery, StatusReply, Error>;

struct Message {
  Header header;
  Body body;
};

enum class DecodeError : uint8_t { None, TooShort, TooLong, BadMagic, BadVersion, BadType, BadSize, BadField };
const char* to_string(DecodeError e) noexcept;
const char* to_string(Type t) noexcept;

// Writes the datagram for `header` + `body` into `out`; returns its size, or 0 if `out` is too small
// or the body is not encodable (key too long, too many status tasks). header.type is taken from body.
size_t encode(Header header, const Body& body, std::span<uint8_t> out) noexcept;

// Fixed-size messages without the variant (the hook's fast path: no variant construction).
size_t encode_notify(uint32_t task_id, uint32_t seq, uint64_t kernel_id, std::span<uint8_t> out,
                     uint64_t launched_ns = 0) noexcept;

// Validates every field and size; on error `out` is unspecified and the datagram must be dropped.
DecodeError decode(std::span<const uint8_t> in, Message& out);

// Helpers for filling key fields (truncating keys longer than kMaxKeyLength).
void set_key(Register& r, std::string_view key) noexcept;
void set_key(TaskStatus& t, std::string_view key) noexcept;

}  // namespace fikit::protocol
