# Run by `cmake --install` (CMakeLists.txt, deployment section) with PP_SOURCE_DIR,
# PP_BINARY_DIR and PP_SYSTEMD_UNITDIR set. It writes the systemd unit for the prefix actually
# installed to (`cmake --install --prefix DIR` may differ from the configured one) and puts
# the configuration in /etc/personaplex for every prefix: the unit's ConfigurationDirectory, and
# where README and --help send the operator (/usr/local/etc would be a second place to look).
# An existing personaplex.conf is an operator's: it is kept, and the new one goes beside it as
# personaplex.conf.example. file(INSTALL) adds $DESTDIR itself; the existence test must too.
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(PP_CONFDIR /etc/personaplex)
set(PP_BINDIR "${prefix}/bin")

# One staging file per prefix: two installs may run at once (the tests do).
string(MD5 tag "$ENV{DESTDIR}${prefix}")
set(unit "${PP_BINARY_DIR}/units/${tag}/personaplex.service")
configure_file("${PP_SOURCE_DIR}/tools/deploy/personaplex.service.in" "${unit}" @ONLY)
if(IS_ABSOLUTE "${PP_SYSTEMD_UNITDIR}")
  set(unitdir "${PP_SYSTEMD_UNITDIR}")
else()
  set(unitdir "${prefix}/${PP_SYSTEMD_UNITDIR}")
endif()
file(INSTALL "${unit}" DESTINATION "${unitdir}")

set(conf "${PP_SOURCE_DIR}/tools/deploy/personaplex.conf")
if(EXISTS "$ENV{DESTDIR}${PP_CONFDIR}/personaplex.conf")
  message(STATUS "Keeping: $ENV{DESTDIR}${PP_CONFDIR}/personaplex.conf (new one: personaplex.conf.example)")
  file(INSTALL "${conf}" DESTINATION "${PP_CONFDIR}" RENAME personaplex.conf.example)
else()
  file(INSTALL "${conf}" DESTINATION "${PP_CONFDIR}")
endif()
