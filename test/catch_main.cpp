// The one Catch2 main shared by every exo test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
