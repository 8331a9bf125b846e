# Run by `cmake --install` (and cpack): the files that name installed paths.
# CMAKE_INSTALL_PREFIX is the prefix in force now (--prefix, or cpack's /usr);
# file(INSTALL) puts $DESTDIR, when set, before every path it writes.
set(prefix "${CMAKE_INSTALL_PREFIX}")
set(AGENTD_BIN "${prefix}/${AGENTD_BINDIR}")
# /usr's configuration lives in /etc (the FHS, as GNUInstallDirs has it).
if(prefix STREQUAL "/usr")
  set(AGENTD_CONFDIR "/etc/agentd")
else()
  set(AGENTD_CONFDIR "${prefix}/etc/agentd")
endif()
foreach(unit ${AGENTD_UNITS})
  configure_file("${AGENTD_PKG_SRC}/${unit}.in" "${AGENTD_PKG_BIN}/${unit}" @ONLY)
  file(INSTALL "${AGENTD_PKG_BIN}/${unit}" DESTINATION "${prefix}/lib/systemd/system"
       FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
endforeach()
# The live configuration: the sample, never over an edited one.
if(NOT EXISTS "$ENV{DESTDIR}${AGENTD_CONFDIR}/agentd.ini")
  file(INSTALL "${AGENTD_PKG_SRC}/agentd.ini.sample" DESTINATION "${AGENTD_CONFDIR}"
       RENAME agentd.ini FILE_PERMISSIONS OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)
else()
  message(STATUS "Keeping: $ENV{DESTDIR}${AGENTD_CONFDIR}/agentd.ini (edited: not replaced)")
endif()
