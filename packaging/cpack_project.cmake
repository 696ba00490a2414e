# Read by cpack while it packs (CPACK_PROJECT_CONFIG_FILE of
# packaging/CMakeLists.txt): scripts/package.sh --revision N sets
# DELAYQ_DEB_REVISION, so a newer build of the same tree needs no configure.
if(NOT "$ENV{DELAYQ_DEB_REVISION}" STREQUAL "")
  set(CPACK_DEBIAN_PACKAGE_RELEASE "$ENV{DELAYQ_DEB_REVISION}")
endif()
