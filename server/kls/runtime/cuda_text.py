"""kls's own C++ text for the header and globals a template's `template.header()` /
`template.globals()` return: the includes a CUDA or CUTLASS kernel needs (which headers is a
fact) and kls's own PT_EXPORT / CUTLASS_CHECK. The inductor-2023 profile emits it; the
torch-2.11 profile emits it only when there is no torch source to read Inductor's own from.
"""

CUDA_HEADER = """\
#include <exception>
#include <iostream>
#include <memory>
#include <random>
#include <vector>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
"""

CUTLASS_HEADER = """\
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/numeric_types.h"
#include "cutlass/tensor_ref.h"
#include "cutlass/util/host_tensor.h"
#include "cutlass/util/reference/host/tensor_fill.h"
#include "cutlass/util/device_memory.h"
"""

GEMM_HEADER = """\
#include "cutlass/gemm/gemm.h"
#include "cutlass/gemm/device/gemm_universal.h"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/collective/default_epilogue.hpp"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/tile_scheduler.hpp"
#include "cutlass/util/distribution.h"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass/util/tensor_view_io.h"
"""

CUDA_GLOBALS = """\
// Libraries are linked with -fvisibility=hidden, so nothing leaves the .so unless marked:
// PT_EXPORT gives the entry that the caller resolves by name default visibility.
#if defined(__GNUC__)
#define PT_EXPORT __attribute__((visibility("default")))
#elif defined(_WIN32)
#define PT_EXPORT __declspec(dllexport)
#else
#define PT_EXPORT
#endif
using bfloat16 = nv_bfloat16;
"""

# CUTLASS_CHECK stays a braced block (so a use with or without a trailing `;` compiles, as
# templates written against Inductor expect); the work is in an inline function.
CUTLASS_GLOBALS = """\
using namespace cute;
// Throws when a CUTLASS call did not return kSuccess, naming the status and the call site.
inline void kls_cutlass_check(cutlass::Status result, const char* file, int line) {
  if (result == cutlass::Status::kSuccess) return;
  std::string what = "CUTLASS call failed with ";
  what += cutlassGetStatusString(result);
  what += " (" + std::string(file) + ":" + std::to_string(line) + ")";
  throw std::runtime_error(what);
}
#define CUTLASS_CHECK(status) { kls_cutlass_check((status), __FILE__, __LINE__); }
"""
