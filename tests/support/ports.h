// A TCP port for a test's rendezvous.
#pragma once

namespace tandem::testing {

// A loopback port nobody listens on now (the kernel's pick for port 0, released at once).
int free_port();

}  // namespace tandem::testing
