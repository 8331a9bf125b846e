# floors_test: cmake/floors.cmake refuses each kind of bad include and passes
# the clean tree (cmake -DSRC=<source dir> -P tests/floors_test.cmake).
#
# The tree's .c and .h files and docs/architecture.md are copied to a
# temporary directory (agentd-floors-*, removed at the end); each case plants
# one bad include or one bad row there, runs the check on the copy, asserts
# that it fails naming the file and the include (or the row), and puts the
# file back.
cmake_minimum_required(VERSION 3.18)
if(NOT SRC)
  message(FATAL_ERROR "usage: cmake -DSRC=<source dir> -P floors_test.cmake")
endif()
get_filename_component(SRC "${SRC}" ABSOLUTE)
set(check "${SRC}/cmake/floors.cmake")
set(tmpbase "$ENV{TMPDIR}")
if(NOT tmpbase)
  set(tmpbase /tmp)
endif()
string(RANDOM LENGTH 10 rnd)
set(T "${tmpbase}/agentd-floors-${rnd}")
file(MAKE_DIRECTORY "${T}/docs")
file(COPY "${SRC}/docs/architecture.md" DESTINATION "${T}/docs")
file(GLOB tops LIST_DIRECTORIES true RELATIVE "${SRC}" "${SRC}/*")
foreach(t ${tops})
  if(IS_DIRECTORY "${SRC}/${t}" AND NOT t MATCHES "^\\." AND NOT EXISTS "${SRC}/${t}/CMakeCache.txt")
    file(COPY "${SRC}/${t}" DESTINATION "${T}" FILES_MATCHING PATTERN "*.c" PATTERN "*.h"
         PATTERN "node_modules" EXCLUDE PATTERN "CMakeFiles" EXCLUDE)
  endif()
endforeach()

set(failed "")
set(ncases 0)

# run(out rc): the check on the copy.
function(run out rc)
  execute_process(COMMAND "${CMAKE_COMMAND}" "-DSRC=${T}" -P "${check}"
                  RESULT_VARIABLE r OUTPUT_VARIABLE o ERROR_VARIABLE o)
  string(REGEX REPLACE "\n[ \t]*\n" "\n" o "${o}")
  set(${out} "${o}" PARENT_SCOPE)
  set(${rc} "${r}" PARENT_SCOPE)
endfunction()

# judge(name rc out must...): the check must have failed, naming every string in must.
function(judge name rc out)
  set(why "")
  if(rc EQUAL 0)
    set(why "the check passed")
  else()
    foreach(m ${ARGN})
      string(FIND "${out}" "${m}" at)
      if(at EQUAL -1)
        string(APPEND why "its output does not name \"${m}\"; ")
      endif()
    endforeach()
  endif()
  if(why)
    set(failed "${failed}  ${name}: ${why}\n    output: ${out}\n" PARENT_SCOPE)
  endif()
endfunction()

# expect_refused(name file text must...): add text as a line at the top of
# file (relative to the copy), run the check, put the file back; the check
# must fail and its output hold every string in must.
function(expect_refused name file text)
  math(EXPR n "${ncases} + 1")
  set(ncases ${n} PARENT_SCOPE)
  set(path "${T}/${file}")
  set(had OFF)
  if(EXISTS "${path}")
    set(had ON)
    file(READ "${path}" orig)
  else()
    set(orig "")
  endif()
  file(WRITE "${path}" "${text}\n${orig}")
  run(out rc)
  if(had)
    file(WRITE "${path}" "${orig}")
  else()
    file(REMOVE "${path}")
  endif()
  judge("${name}" "${rc}" "${out}" ${ARGN})
  set(failed "${failed}" PARENT_SCOPE)
endfunction()

# expect_doc_refused(name from to must...): the same for an edit of the map.
function(expect_doc_refused name from to)
  math(EXPR n "${ncases} + 1")
  set(ncases ${n} PARENT_SCOPE)
  set(path "${T}/docs/architecture.md")
  file(READ "${path}" orig)
  string(REPLACE "${from}" "${to}" edited "${orig}")
  if(edited STREQUAL orig)
    set(failed "${failed}  ${name}: the map holds no \"${from}\" to edit\n" PARENT_SCOPE)
    return()
  endif()
  file(WRITE "${path}" "${edited}")
  run(out rc)
  file(WRITE "${path}" "${orig}")
  judge("${name}" "${rc}" "${out}" ${ARGN})
  set(failed "${failed}" PARENT_SCOPE)
endfunction()

run(out rc)
if(NOT rc EQUAL 0)
  string(APPEND failed "  the clean copy: refused\n    output: ${out}\n")
endif()

# Between folders.
expect_refused("upward folder include" store/store.c "#include \"supervisor/ops.h\""
               "store/store.c" "supervisor/ops.h" "row `store/`")
expect_refused("../ include" common/log.c "#include \"../store/store.h\""
               "common/log.c" "../store/store.h" "row `common/`")
expect_refused("../ include of tests/" bench/bench_util.c "#include \"../tests/suites.h\""
               "bench/bench_util.c" "../tests/suites.h" "nothing outside tests/")
expect_refused("spaced # include" ipc/ipc.c "  #  include \"store/store.h\""
               "ipc/ipc.c" "store/store.h" "row `ipc/`")
expect_refused("<dir/x.h> of a project header" conv/tail.c "#include <supervisor/loop.h>"
               "conv/tail.c" "<supervisor/loop.h>" "row `conv/`")
expect_refused("<x.h> of a project header by a -I folder" agentctl/agentctl.c "#include <backend_names.h>"
               "agentctl/agentctl.c" "<backend_names.h>" "row `agentctl/`")
expect_refused("tests/ used from outside" common/id.c "#include \"tests/suites.h\""
               "common/id.c" "tests/suites.h" "nothing outside tests/")
expect_refused("an unlisted folder" newfloor/x.c "#include \"common/log.h\""
               "newfloor/" "newfloor/x.c" "add its row")
expect_refused("an unclassifiable include" store/flushrec.c "#include STORE_HEADER"
               "store/flushrec.c" "STORE_HEADER" "cannot classify")
expect_refused("a quoted include of nothing" web/auth.c "#include \"nowhere.h\""
               "web/auth.c" "nowhere.h" "names no file")
# Inside supervisor/.
expect_refused("sideways module include" supervisor/loop.c "#include \"supervisor/ops.h\""
               "supervisor/loop.c" "supervisor/ops.h" "row `loop`")
expect_refused("same-folder module include" supervisor/gate.c "#include \"workers.h\""
               "supervisor/gate.c" "\"workers.h\"" "row `gate`")
expect_refused("a module without a row" supervisor/newmod.c "#include \"supervisor/loop.h\""
               "supervisor/newmod.c" "`newmod` has no row")
# The map against the code.
# metrics uses loop: with loop's row moved above metrics', that use runs upward.
set(metrics_row "| `metrics.c` | counters and histograms, the Prometheus text | `loop` (the clock) |")
set(loop_row "| `loop.c` | epoll and the clock, the wall-clock timerfd `expiry` and `wakeup` arm (`loop_realtime_timer`, `loop_realtime_arm`), and the restricted mode a commit on the writer thread runs in; it knows nobody | nothing |")
expect_doc_refused("an upward use not marked a fault"
                   "${metrics_row}\n${loop_row}" "${loop_row}\n${metrics_row}" "row `metrics`" "a row above it")
expect_doc_refused("a use the code does not make"
                   "| `spawn.c` | fork and exec of a worker, the exec's outcome | nothing |"
                   "| `spawn.c` | fork and exec of a worker, the exec's outcome | `loop` |"
                   "row `spawn`" "no file of `spawn` includes")
expect_doc_refused("a floor row naming a row below it"
                   "| `common/` | the ground floor" "| `zzz/` | x | `common/` |\n| `common/` | the ground floor"
                   "row `zzz/`" "not a row above it")

file(REMOVE_RECURSE "${T}")
if(failed)
  message(FATAL_ERROR "floors_test: cmake/floors.cmake let these through:\n${failed}")
endif()
message(STATUS "floors_test: the clean tree passes, ${ncases} planted faults are refused")
