import { Module } from '@nestjs/common';
import { AdminSessions } from './admin-sessions';
import { SignInController } from './sign-in.controller';

/** The sign-in form and its sessions; the admin guard gets `AdminSessions` from here. */
@Module({
  controllers: [SignInController],
  providers: [AdminSessions],
  exports: [AdminSessions],
})
export class AdminSignInModule {}
