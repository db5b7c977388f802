#pragma once
// libcupti, loaded at run time (only in measure mode) and reached through the C library's dlsym: the
// functions the CUPTI timer (cupti_timer.cpp) uses.
#include <cupti.h>

#include <cstddef>

namespace fikit::hook::measure {

struct CuptiApi {
  decltype(&cuptiActivityEnable) enable;
  decltype(&cuptiActivityDisable) disable;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks;
  decltype(&cuptiActivityGetNextRecord) next_record;
  decltype(&cuptiActivityFlushAll) flush_all;
  decltype(&cuptiGetResultString) result_string;
  decltype(&cuptiGetContextId) context_id;
  decltype(&cuptiGetStreamIdEx) stream_id_ex;   // optional: cuptiGetStreamId then
  decltype(&cuptiGetStreamId) stream_id;
};

// Loads libcupti ($FIKIT_CUPTI_PATH, else the CUDA 13 and unversioned names, on the library path and
// in /usr/local/cuda) and fills `api`. False with the reason in `why`. The library stays loaded
// (unloading CUPTI is not supported).
bool load_cupti(CuptiApi& api, char* why, size_t why_len) noexcept;

}  // namespace fikit::hook::measure
