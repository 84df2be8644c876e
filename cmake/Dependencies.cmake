# Every dependency is installed, pinned, by scripts/setup.sh.
find_package(CUDAToolkit 13 REQUIRED)
find_package(fmt 9 REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(CLI11 2.1 REQUIRED)
if(FP4MOE_BUILD_TESTS)
  find_package(GTest 1.12 REQUIRED)
endif()

# CUTLASS/CuTe headers from the nvidia-cutlass PyPI package, used where pip put them.
if(NOT FP4MOE_CUTLASS_INCLUDE_DIR)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  set(_find_cutlass "import importlib.util, os; s = importlib.util.find_spec('cutlass_library'); print(os.path.join(s.submodule_search_locations[0], 'source', 'include'))")
  execute_process(COMMAND ${Python3_EXECUTABLE} -c "${_find_cutlass}"
                  OUTPUT_VARIABLE _cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
  if(NOT _rc EQUAL 0)
    # Inside pip's isolated build environment the interpreter's own packages are
    # hidden through PYTHON* variables; -E looks past them (headers only).
    execute_process(COMMAND ${Python3_EXECUTABLE} -E -c "${_find_cutlass}"
                    OUTPUT_VARIABLE _cutlass_inc OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_QUIET)
  endif()
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_cutlass_inc}/cutlass/version.h")
    message(FATAL_ERROR "CUTLASS headers not found (pip package nvidia-cutlass==4.2.0.0); run scripts/setup.sh")
  endif()
  set(FP4MOE_CUTLASS_INCLUDE_DIR "${_cutlass_inc}" CACHE PATH "CUTLASS include directory")
endif()
file(STRINGS "${FP4MOE_CUTLASS_INCLUDE_DIR}/cutlass/version.h" _v REGEX "define CUTLASS_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE ".*MAJOR ([0-9]+).*MINOR ([0-9]+).*PATCH ([0-9]+).*" "\\1.\\2.\\3" FP4MOE_CUTLASS_VERSION "${_v}")
message(STATUS "CUTLASS ${FP4MOE_CUTLASS_VERSION} headers: ${FP4MOE_CUTLASS_INCLUDE_DIR}")
