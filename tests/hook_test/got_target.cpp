// A library that calls ioctl through its PLT, as the driver does: what preempt/got_patch.h points
// elsewhere in preempt_test.cpp.
#include <sys/ioctl.h>

extern "C" __attribute__((visibility("default"))) int fikit_got_target_ioctl(int fd, unsigned long request, void* arg) {
  return ioctl(fd, request, arg);
}
