# Dependencies of the installed delayq persistence libraries. Included by
# delayqConfig.cmake before delayqTargets.cmake.
include(CMakeFindDependencyMacro)
find_dependency(SQLiteCpp)
find_dependency(PkgConfig)
if(NOT TARGET PkgConfig::HIREDIS)
  pkg_check_modules(HIREDIS REQUIRED IMPORTED_TARGET hiredis)
endif()
if(NOT TARGET PkgConfig::LIBPQ)
  pkg_check_modules(LIBPQ REQUIRED IMPORTED_TARGET libpq)
endif()
