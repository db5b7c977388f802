#pragma once
// The one parser of scheduler addresses as people write them: "HOST:PORT", "[IPV6]:PORT". The hook
// (FIKIT_SCHEDULER), fikit-run (--scheduler) and the daemon (--listen, --metrics, status
// --scheduler) all use it. No allocation: the hook parses inside other programs.
#include <cstdint>
#include <string_view>

namespace fikit::values {

// Splits `text` into a host (brackets of an IPv6 literal removed; no spaces; a bare host has no
// colon) and a port 1..65535 (0 too with allow_port_zero: "any free port", for a listener). False
// when malformed; then *host and *port are unchanged.
bool split_host_port(std::string_view text, std::string_view* host, uint16_t* port,
                     bool allow_port_zero = false) noexcept;

// What every refusal of an address adds after "'TEXT' is not HOST:PORT", so that none forgets the
// brackets an IPv6 literal needs ("::1:47800" is refused: its port cannot be told from the address).
inline constexpr char kAddressForm[] = "an IPv6 address in brackets: [::1]:47800";

}  // namespace fikit::values
