#pragma once

/// The CUDA runtime names used by gpu_backend_impl.hpp, mapped to the GPU
/// emulator's runtime (gpu_emulator.hpp), as hip_runtime_compat.hpp maps
/// them to HIP's.

#include "backends/gpu_common/gpu_emulator.hpp"

#define EXO_EMU_ ::exo::backend::gpu::emu::
#define cudaDevAttrClockRate EXO_EMU_ attr_clock_rate
#define cudaDevAttrMemoryClockRate EXO_EMU_ attr_memory_clock_rate
#define cudaDeviceCanAccessPeer EXO_EMU_ device_can_access_peer
#define cudaDeviceEnablePeerAccess EXO_EMU_ device_enable_peer_access
#define cudaDeviceGetAttribute EXO_EMU_ device_get_attribute
#define cudaDeviceGetDefaultMemPool EXO_EMU_ device_get_default_mem_pool
#define cudaDeviceGetPCIBusId EXO_EMU_ device_get_pci_bus_id
#define cudaDeviceProp EXO_EMU_ device_prop
#define cudaDriverGetVersion EXO_EMU_ driver_get_version
#define cudaErrorNotReady EXO_EMU_ error_not_ready
#define cudaErrorPeerAccessAlreadyEnabled \
  EXO_EMU_ error_peer_access_already_enabled
#define cudaError_t EXO_EMU_ error_t
#define cudaEventCreateWithFlags EXO_EMU_ event_create_with_flags
#define cudaEventDestroy EXO_EMU_ event_destroy
#define cudaEventDisableTiming EXO_EMU_ event_disable_timing
#define cudaEventQuery EXO_EMU_ event_query
#define cudaEventRecord EXO_EMU_ event_record
#define cudaEventSynchronize EXO_EMU_ event_synchronize
#define cudaEvent_t EXO_EMU_ event_t
#define cudaFreeAsync EXO_EMU_ free_async
#define cudaFreeHost EXO_EMU_ free_host
#define cudaGetDeviceCount EXO_EMU_ get_device_count
#define cudaGetDeviceProperties EXO_EMU_ get_device_properties
#define cudaGetErrorString EXO_EMU_ get_error_string
#define cudaGetLastError EXO_EMU_ get_last_error
#define cudaMallocAsync EXO_EMU_ malloc_async
#define cudaMallocHost EXO_EMU_ malloc_host
#define cudaMemGetInfo EXO_EMU_ mem_get_info
#define cudaMemPoolAttrReleaseThreshold EXO_EMU_ pool_release_threshold
#define cudaMemPoolSetAttribute EXO_EMU_ mem_pool_set_attribute
#define cudaMemPool_t EXO_EMU_ mem_pool_t
#define cudaMemcpy2DAsync EXO_EMU_ memcpy_2d_async
#define cudaMemcpyAsync EXO_EMU_ memcpy_async
#define cudaMemcpyDeviceToDevice EXO_EMU_ device_to_device
#define cudaMemcpyDeviceToHost EXO_EMU_ device_to_host
#define cudaMemcpyHostToDevice EXO_EMU_ host_to_device
#define cudaMemcpyPeerAsync EXO_EMU_ memcpy_peer_async
#define cudaSetDevice EXO_EMU_ set_device
#define cudaStreamCreateWithFlags EXO_EMU_ stream_create_with_flags
#define cudaStreamDestroy EXO_EMU_ stream_destroy
#define cudaStreamNonBlocking EXO_EMU_ stream_non_blocking
#define cudaStreamSynchronize EXO_EMU_ stream_synchronize
#define cudaStreamWaitEvent EXO_EMU_ stream_wait_event
#define cudaStream_t EXO_EMU_ stream_t
#define cudaSuccess EXO_EMU_ success
