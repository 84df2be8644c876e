# Every dependency is installed, pinned, by scripts/setup.sh.
find_package(CUDAToolkit 13 REQUIRED)
find_package(fmt 9 REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(CLI11 2.1 REQUIRED)
if(FP4MOE_BUILD_TESTS)
  find_package(GTest 1.12 REQUIRED)
endif()

# CUTLASS/CuTe headers: FP4MOE_CUTLASS_INCLUDE_DIR, or else the nvidia-cutlass
# package of the build's Python, looked up at every configure (under pip it is a
# build requirement, in an isolated environment that is new, at a new path, every build).
set(FP4MOE_CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS include directory (empty: the nvidia-cutlass package's)")
set(_cutlass_inc "${FP4MOE_CUTLASS_INCLUDE_DIR}")
if(_cutlass_inc AND NOT EXISTS "${_cutlass_inc}/cutlass/version.h")
  # e.g. an earlier pip build's environment, which is gone
  message(WARNING "FP4MOE_CUTLASS_INCLUDE_DIR ${_cutlass_inc} holds no cutlass/version.h: using the nvidia-cutlass package")
  set(_cutlass_inc "")
endif()
if(NOT _cutlass_inc)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(_find_cutlass "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(s.submodule_search_locations[0], 'source', 'include'))")
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "${_find_cutlass}"
                  OUTPUT_VARIABLE _cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_cutlass_inc}/cutlass/version.h")
    message(FATAL_ERROR "CUTLASS headers not found (pip package nvidia-cutlass==4.2.0.0 for ${Python3_EXECUTABLE}); "
                        "run scripts/setup.sh or set FP4MOE_CUTLASS_INCLUDE_DIR")
  endif()
endif()
file(STRINGS "${_cutlass_inc}/cutlass/version.h" _v REGEX "define CUTLASS_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" FP4MOE_CUTLASS_VERSION "${_v}")
message(STATUS "CUTLASS ${FP4MOE_CUTLASS_VERSION} headers: ${_cutlass_inc}")
# The kernels compile against a copy in the build folder, so that their command
# lines name it relative to CCACHE_BASEDIR and ccache serves the same objects to
# every build folder and clone (the pip build after the CMake build of a
# checkout; each pip build's new environment). ccache rewrites nvcc's spaced
# -isystem DIR, not the -isystem=DIR form CMake uses by default.
# file(COPY) keeps the files' times and skips those already copied.
set(_cutlass_copy "${PROJECT_BINARY_DIR}/cutlass-${FP4MOE_CUTLASS_VERSION}/include")
file(COPY "${_cutlass_inc}/" DESTINATION "${_cutlass_copy}")
set(FP4MOE_CUTLASS_INCLUDE_DIR "${_cutlass_copy}")  # for this configure; the cache keeps what was given
set(CMAKE_INCLUDE_SYSTEM_FLAG_CUDA "-isystem ")
