# The minimal build's configuration (cmake -C scripts/minimal.cmake):
# without libpq and libcurl, as a Release (-O3, NDEBUG) build, its tests
# built.  scripts/test.sh --minimal builds build-min/ so, and
# tests/release_build.sh configures it to learn which translation units
# that tree compiles as the default one does.
set(PL_BUILD_TESTS ON CACHE BOOL "" FORCE)
set(PL_SANITIZE OFF CACHE BOOL "" FORCE)
set(CMAKE_BUILD_TYPE Release CACHE STRING "" FORCE)
set(PL_WITH_POSTGRESQL OFF CACHE BOOL "" FORCE)
set(PL_WITH_CURL OFF CACHE BOOL "" FORCE)
set(PL_WITH_WEB OFF CACHE BOOL "" FORCE)
set(PL_BROWSER_TESTS OFF CACHE BOOL "" FORCE)
