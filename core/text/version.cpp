// exo::library_version(), declared in the public exo/version.hpp
// (include/exo/version.hpp.in, generated into the build tree).

namespace exo {

const char* library_version() noexcept;

const char* library_version() noexcept {
  return EXO_VERSION;
}

} // namespace exo
