# make_docs.cmake: run by the `server` component's install (packaging/
# CMakeLists.txt) while CPack packs: writes the man pages of delayq-server and
# delayqctl (help2man, from --help and --version) and the Debian changelog,
# gzipped as Debian wants them, into the package's tree.
set(root "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}")
find_program(HELP2MAN help2man)
if(NOT HELP2MAN)
  message(FATAL_ERROR "help2man not found: apt-get install help2man (scripts/package.sh installs it)")
endif()
find_program(GZIP gzip REQUIRED)
file(MAKE_DIRECTORY "${root}/share/man/man1" "${root}/share/doc/delayq-server")

function(delayq_man program binary name)
  set(out "${root}/share/man/man1/${program}.1")
  execute_process(
    COMMAND "${HELP2MAN}" --no-info --no-discard-stderr --section=1
            "--name=${name}" "--version-string=${DELAYQ_DEB_VERSION}"
            --output=${out} "${binary}"
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "help2man ${binary} failed (${rc})")
  endif()
  # -n: no name or time in the header, so the same input packs the same.
  execute_process(COMMAND "${GZIP}" -9nf "${out}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${out} failed")
  endif()
endfunction()
delayq_man(delayq-server "${DELAYQ_SERVER}" "delayed tasks over HTTP")
delayq_man(delayqctl "${DELAYQ_CTL}" "the admin command of delayq-server")

# SOURCE_DATE_EPOCH, when set, fixes the date (reproducible builds).
string(TIMESTAMP DELAYQ_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
configure_file("${DELAYQ_CHANGELOG_IN}" "${root}/share/doc/delayq-server/changelog.Debian" @ONLY)
execute_process(COMMAND "${GZIP}" -9nf "${root}/share/doc/delayq-server/changelog.Debian"
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip changelog.Debian failed")
endif()
