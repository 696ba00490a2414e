# delayq_readme_blocks(<readme> <lang> <out_dir> <out_var>)
#
# Writes every fenced block of language <lang> in <readme> (a line "```<lang>"
# up to the next line "```") to <out_dir>/block_<N>.<ext>, N from 1 in the
# order they appear, and sets <out_var> to the list of those files. A file is
# rewritten only when its text changed, so an edit elsewhere in the README
# rebuilds nothing. Usable from a project (examples/CMakeLists.txt) and from a
# cmake -P script (tests/consumer/run.cmake): the README's code is checked as
# shown, never a copy of it that could drift.
#
# Plain string search rather than file(STRINGS) or regexes: C++ is full of
# semicolons (CMake's list separator) and of characters a regex would need
# escaped.
function(delayq_readme_blocks readme lang out_dir out_var)
  file(READ "${readme}" text)
  set(ext "${lang}")
  if(lang STREQUAL "cmake")
    set(ext "cmake.txt")
  endif()
  set(open "\n```${lang}\n")
  set(close "\n```")
  set(text "\n${text}")
  set(files "")
  set(n 0)
  file(MAKE_DIRECTORY "${out_dir}")
  while(TRUE)
    string(FIND "${text}" "${open}" at)
    if(at EQUAL -1)
      break()
    endif()
    string(LENGTH "${open}" open_length)
    math(EXPR start "${at} + ${open_length}")
    string(SUBSTRING "${text}" ${start} -1 text)
    # The block's closing fence; the newline before it stays with the block.
    string(FIND "${text}" "${close}" end)
    if(end EQUAL -1)
      message(FATAL_ERROR "${readme}: block ${n} of ```${lang} is never closed")
    endif()
    math(EXPR n "${n} + 1")
    math(EXPR keep "${end} + 1")
    string(SUBSTRING "${text}" 0 ${keep} block)
    string(SUBSTRING "${text}" ${keep} -1 text)
    set(file "${out_dir}/block_${n}.${ext}")
    file(WRITE "${file}.new" "${block}")
    file(COPY_FILE "${file}.new" "${file}" ONLY_IF_DIFFERENT)
    file(REMOVE "${file}.new")
    list(APPEND files "${file}")
  endwhile()
  set(${out_var} "${files}" PARENT_SCOPE)
endfunction()
